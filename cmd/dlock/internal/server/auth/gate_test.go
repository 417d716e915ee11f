package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/tlstest"
)

// tokA is a token of the fuzz seeds.
const tokA = "team-a-secret-token"

// idTeamA is an auth file entry of a client certificate.
const idTeamA = `{"tenant":"team-a","identity":"uri:spiffe://dlock.test/team-a","prefixes":["team-a/"],"access":"read-write"}`

// TestAuthFileErrors: bad auth files are refused with the entry and field
// named, and never the hash.
func TestAuthFileErrors(t *testing.T) {
	h := HashToken("x")
	for _, tc := range []struct{ body, want string }{
		{``, "not a valid auth file"},
		{`[]`, "not a valid auth file"},
		{`{"tokens":[],"extra":1}`, "not a valid auth file"},
		{`{"tokens":[]} {}`, "after the JSON object"},
		{`{"tokens":[{"tenant":"","sha256":"` + h + `","prefixes":[""],"access":"read-only"}]}`, "tokens[0].tenant"},
		{`{"tokens":[{"tenant":"a b","sha256":"` + h + `","prefixes":[""],"access":"read-only"}]}`, "tokens[0].tenant"},
		{`{"tokens":[{"tenant":"a","sha256":"` + h[:63] + `","prefixes":[""],"access":"read-only"}]}`, "tokens[0].sha256"},
		{`{"tokens":[{"tenant":"a","sha256":"` + strings.Repeat("g", 64) + `","prefixes":[""],"access":"read-only"}]}`, "tokens[0].sha256"},
		{`{"tokens":[{"tenant":"a","sha256":"` + h + `","prefixes":[""],"access":"read-only"},{"tenant":"b","sha256":"` + h + `","prefixes":[""],"access":"read-only"}]}`, "tokens[1].sha256 repeats"},
		{`{"tokens":[{"tenant":"a","sha256":"` + h + `","access":"read-only"}]}`, "tokens[0].prefixes"},
		{`{"tokens":[{"tenant":"a","sha256":"` + h + `","prefixes":[""],"access":"write"}]}`, "tokens[0].access"},
		{`{"tokens":[{"tenant":"a","sha256":"` + h + `","prefixes":[""],"access":"read-only","maxHolds":-1}]}`, "tokens[0].maxHolds"},
		{`{"tokens":[{"tenant":"a","sha256":"` + h + `","prefixes":[""],"access":"read-only","acquiresPerSecond":-1}]}`, "tokens[0].acquiresPerSecond"},
		{`{"tokens":[{"tenant":"a","token":"x"}]}`, "unknown field"},
		{`{"tokens":[{"tenant":"a","sha256":"` + h + `","prefixes":[""],"access":"admin","name":"x\u0007"}]}`, "tokens[0].name"},
		{`{"tokens":[{"tenant":"a","sha256":"` + h + `","prefixes":[""],"access":"admin","name":"` + strings.Repeat("n", 129) + `"}]}`, "tokens[0].name"},
	} {
		_, err := parseAuthFile([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseAuthFile(%.80s) = %v, want an error with %q", tc.body, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), h[:16]) {
			t.Errorf("parseAuthFile error %q shows the hash", err)
		}
	}

}

// TestAuthFileDocExample: the auth file example of docs/operations.md is a
// valid auth file.
func TestAuthFileDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```json\n(\\{.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/operations.md has no JSON example")
	}
	entries, err := parseAuthFile(m[1])
	if err != nil || len(entries) == 0 {
		t.Fatalf("the example of docs/operations.md: %d entries, %v", len(entries), err)
	}
	// Each hash is a bearer token's, as the doc names them: a hash of
	// "foo\n" (echo's output) is one no bearer token can match.
	named := regexp.MustCompile("example's hashes are those of the tokens ([^\n]*(?:\n[^\n]*)?), in").FindSubmatch(doc)
	if named == nil {
		t.Fatal("docs/operations.md does not name the example's tokens")
	}
	tokens := regexp.MustCompile("`([^`]+)`").FindAllSubmatch(named[1], -1)
	if len(tokens) != len(entries) {
		t.Fatalf("docs/operations.md names %d tokens for %d entries", len(tokens), len(entries))
	}
	for i, e := range entries {
		if tok := string(tokens[i][1]); !strings.EqualFold(e.SHA256, HashToken(tok)) {
			t.Errorf("entry %d: sha256 %s is not the hash of the token %q", i, e.SHA256, tok)
		}
	}
}

// FuzzParseAuthFile: any file is parsed or refused, never a panic, and a
// refusal never shows a hash from the file.
func FuzzParseAuthFile(f *testing.F) {
	f.Add([]byte(`{"tokens":[{"tenant":"team-a","sha256":"` + HashToken(tokA) + `","prefixes":["team-a/"],"access":"read-write"}]}`))
	f.Add([]byte(`{"tokens":[{"tenant":"a","sha256":"` + HashToken("x") + `","prefixes":[""],"access":"read-only","maxHolds":1,"acquiresPerSecond":0.5}]}`))
	f.Add([]byte(`{"tokens":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseAuthFile(data)
		if err != nil {
			if strings.Contains(err.Error(), HashToken(tokA)) {
				t.Errorf("error %q shows a hash", err)
			}
			return
		}
		for _, e := range entries {
			if !tenantName.MatchString(e.Tenant) || len(e.SHA256) != 64 || len(e.Prefixes) == 0 {
				t.Errorf("accepted entry %+v breaks the file's rules", e)
			}
		}
	})
}

// TestCertIdentity: URI SAN, then DNS SAN, then e-mail SAN, then IP SAN,
// then (with no SubjectAltName extension at all) CN; two values of the
// winning class name no one; an auth file's ip: entry is an address in
// the form the certificate's is read.
func TestCertIdentity(t *testing.T) {
	u := func(s string) *url.URL { v, _ := url.Parse(s); return v }
	for _, tc := range []struct {
		cert    x509.Certificate
		want    string
		wantErr string
	}{
		{x509.Certificate{URIs: []*url.URL{u("spiffe://a/b")}, DNSNames: []string{"x"}}, "uri:spiffe://a/b", ""},
		{x509.Certificate{DNSNames: []string{"svc.internal"}}, "dns:svc.internal", ""},
		{x509.Certificate{}, "", "no SubjectAltName and no subject CN"},
		{x509.Certificate{URIs: []*url.URL{u("spiffe://a/b"), u("spiffe://a/c")}}, "", "2 URI SANs"},
		{x509.Certificate{DNSNames: []string{"a", "b"}}, "", "2 DNS SANs"},
	} {
		got, err := certIdentity(&tc.cert)
		if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("certIdentity(%v %v) = %q, %v; want %q, %q", tc.cert.URIs, tc.cert.DNSNames, got, err, tc.want, tc.wantErr)
		}
	}
	cn := x509.Certificate{}
	cn.Subject.CommonName = "batch"
	if got, err := certIdentity(&cn); got != "cn:batch" || err != nil {
		t.Errorf("certIdentity(CN batch) = %q, %v; want cn:batch", got, err)
	}
	// Issued certificates, parsed as the server reads them: the CN counts
	// only without a SubjectAltName extension.
	ca, err := tlstest.NewCA("identity CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what    string
		leaf    tlstest.Leaf
		want    string
		wantErr string
	}{
		{"CN only", tlstest.Leaf{CN: "batch"}, "cn:batch", ""},
		{"e-mail SAN and CN", tlstest.Leaf{CN: "batch", Emails: []string{"billing@dlock.test"}}, "email:billing@dlock.test", ""},
		{"IPv4 SAN and CN", tlstest.Leaf{CN: "batch", IPs: []net.IP{net.IPv4(10, 0, 0, 7)}}, "ip:10.0.0.7", ""},
		{"IPv6 SAN and CN", tlstest.Leaf{CN: "batch", IPs: []net.IP{net.ParseIP("2001:db8::7")}}, "ip:2001:db8::7", ""},
		{"e-mail and IP SANs", tlstest.Leaf{Emails: []string{"billing@dlock.test"}, IPs: []net.IP{net.IPv4(10, 0, 0, 7)}}, "email:billing@dlock.test", ""},
		{"DNS and e-mail SANs", tlstest.Leaf{DNS: []string{"svc.internal"}, Emails: []string{"billing@dlock.test"}}, "dns:svc.internal", ""},
		{"two e-mail SANs", tlstest.Leaf{CN: "batch", Emails: []string{"a@dlock.test", "b@dlock.test"}}, "", "2 e-mail SANs"},
		{"two IP SANs", tlstest.Leaf{CN: "batch", IPs: []net.IP{net.IPv4(10, 0, 0, 7), net.IPv4(10, 0, 0, 8)}}, "", "2 IP SANs"},
		{"an otherName SAN only, and CN", tlstest.Leaf{CN: "batch", Extra: []pkix.Extension{otherNameSAN(t)}}, "", "counts only without the extension"},
	} {
		p, err := ca.Issue(tc.leaf)
		if err != nil {
			t.Fatalf("%s: Issue = %v", tc.what, err)
		}
		got, err := certIdentity(p.Cert)
		if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("certIdentity(%s) = %q, %v; want %q, %q", tc.what, got, err, tc.want, tc.wantErr)
		}
	}
	for _, bad := range []string{
		`{"tokens":[{"tenant":"a","identity":"spiffe://x","prefixes":[""],"access":"read-write"}]}`,
		`{"tokens":[{"tenant":"a","identity":"uri:","prefixes":[""],"access":"read-write"}]}`,
		`{"tokens":[{"tenant":"a","identity":"cn:x","sha256":"` + HashToken("t") + `","prefixes":[""],"access":"read-write"}]}`,
		`{"tokens":[` + idTeamA + `,` + strings.Replace(idTeamA, "team-a\",\"identity", "team-b\",\"identity", 1) + `]}`,
		`{"tokens":[{"tenant":"a","identity":"ip:10.0.0.07","prefixes":[""],"access":"read-write"}]}`,
		`{"tokens":[{"tenant":"a","identity":"ip:2001:DB8::7","prefixes":[""],"access":"read-write"}]}`,
		`{"tokens":[{"tenant":"a","identity":"ip:::ffff:10.0.0.7","prefixes":[""],"access":"read-write"}]}`,
		`{"tokens":[{"tenant":"a","identity":"ip:host.internal","prefixes":[""],"access":"read-write"}]}`,
		`{"tokens":[{"tenant":"a","identity":"email:","prefixes":[""],"access":"read-write"}]}`,
	} {
		if _, err := parseAuthFile([]byte(bad)); err == nil || !strings.Contains(err.Error(), "tokens[") {
			t.Errorf("parseAuthFile(%s) = %v, want an error naming the entry", bad, err)
		}
	}
	good := `{"tokens":[{"tenant":"a","identity":"ip:2001:db8::7","prefixes":[""],"access":"read-write"},` +
		`{"tenant":"b","identity":"ip:10.0.0.7","prefixes":[""],"access":"read-write"},` +
		`{"tenant":"c","identity":"email:billing@dlock.test","prefixes":[""],"access":"read-write"}]}`
	if _, err := parseAuthFile([]byte(good)); err != nil {
		t.Errorf("parseAuthFile(%s) = %v, want it accepted", good, err)
	}
}

// otherNameSAN is a SubjectAltName extension holding one otherName (a
// Microsoft UPN), a name Go does not read into a field.
func otherNameSAN(t *testing.T) pkix.Extension {
	t.Helper()
	upn, err := asn1.Marshal("batch@corp.example")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := asn1.Marshal(struct {
		ID    asn1.ObjectIdentifier
		Value asn1.RawValue `asn1:"explicit,tag:0"`
	}{asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 20, 2, 3}, asn1.RawValue{FullBytes: upn}})
	if err != nil {
		t.Fatal(err)
	}
	// Re-tag the SEQUENCE as otherName, [0] IMPLICIT (constructed).
	var seq asn1.RawValue
	if _, err := asn1.Unmarshal(inner, &seq); err != nil {
		t.Fatal(err)
	}
	names, err := asn1.Marshal([]asn1.RawValue{{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: seq.Bytes}})
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: names}
}
