package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server/auth"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/tlstest"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/store/memory"
)

// pki is a private CA, another CA, and the server's files in a directory.
type pki struct {
	dir              string
	ca, other        *tlstest.CA
	caFile           string
	certFile, keyOut string
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	var err error
	if p.ca, err = tlstest.NewCA("dlock test CA"); err != nil {
		t.Fatal(err)
	}
	if p.other, err = tlstest.NewCA("another CA"); err != nil {
		t.Fatal(err)
	}
	if p.caFile, err = p.ca.WriteFile(p.dir, "ca"); err != nil {
		t.Fatal(err)
	}
	srv, err := p.ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	if p.certFile, p.keyOut, err = srv.WriteFiles(p.dir, "server"); err != nil {
		t.Fatal(err)
	}
	return p
}

// client returns a TLS client certificate of ca with the leaf's names.
func issue(t *testing.T, ca *tlstest.CA, l tlstest.Leaf) tls.Certificate {
	t.Helper()
	p, err := ca.Issue(l)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tlsServer serves cfg over TLS on a loopback port until the test ends.
type tlsServer struct {
	srv  *Server
	base string
	log  *lockedBuf
}

func startTLS(t testing.TB, cfg Config) *tlsServer {
	t.Helper()
	m := dlockprom.New()
	l, err := dlock.New(memory.New(), dlock.WithObserver(m.Observe))
	if err != nil {
		t.Fatal(err)
	}
	lg := &lockedBuf{}
	cfg.Metrics, cfg.StoreName = m, "memory"
	cfg.Logger = slog.New(slog.NewTextHandler(lg, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := New(l, cfg)
	if err != nil {
		l.Close()
		t.Fatalf("New = %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
		l.Close()
	})
	return &tlsServer{srv: srv, base: "https://" + ln.Addr().String(), log: lg}
}

// lockedBuf is a bytes.Buffer for one writer and concurrent readers.
type lockedBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// httpsClient trusts roots and presents certs; HTTP/2 when h2.
func httpsClient(t *testing.T, roots *x509.CertPool, h2 bool, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

type reply struct {
	code  int
	proto string
	body  map[string]any
	state *tls.ConnectionState
}

func call(c *http.Client, method, url, body string, hdr ...string) (reply, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{code: resp.StatusCode, proto: resp.Proto, state: resp.TLS}
	if err := json.Unmarshal(data, &r.body); err != nil {
		return r, fmt.Errorf("%s %s: body %q: %v", method, url, data, err)
	}
	return r, nil
}

func mustCall(t *testing.T, c *http.Client, want int, method, url, body string, hdr ...string) reply {
	t.Helper()
	r, err := call(c, method, url, body, hdr...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if r.code != want {
		t.Fatalf("%s %s = %d %v, want %d", method, url, r.code, r.body, want)
	}
	return r
}

// TestTLSListener: acquire, extend and release over HTTPS with a private
// CA, over HTTP/2 and HTTP/1.1; TLS 1.1 is refused; a client that does
// not trust the CA fails naming the certificate problem.
func TestTLSListener(t *testing.T) {
	p := newPKI(t)
	s := startTLS(t, Config{TLSCert: p.certFile, TLSKey: p.keyOut})
	for _, h2 := range []bool{true, false} {
		c := httpsClient(t, p.ca.Pool(), h2)
		name := fmt.Sprintf("tls-h2-%v", h2)
		r := mustCall(t, c, 200, "POST", s.base+"/v1/locks/"+name+"/acquire", `{"ttlMs":30000}`)
		wantProto := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]
		if r.proto != wantProto || r.state == nil || r.state.Version < tls.VersionTLS12 {
			t.Errorf("acquire over %s: proto %s, TLS state %+v; want %s over TLS 1.2+", wantProto, r.proto, r.state, wantProto)
		}
		tok := r.body["token"].(string)
		mustCall(t, c, 200, "POST", s.base+"/v1/locks/"+name+"/extend", `{"token":"`+tok+`","ttlMs":60000}`)
		mustCall(t, c, 200, "POST", s.base+"/v1/locks/"+name+"/release", `{"token":"`+tok+`"}`)
		mustCall(t, c, 200, "POST", s.base+"/v1/locks/"+name+"/acquire", `{"ttlMs":30000}`)
	}

	old := httpsClient(t, p.ca.Pool(), false)
	old.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS10
	old.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
	if _, err := call(old, "GET", s.base+"/health", ""); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("GET /health with TLS 1.1 at most = %v, want a protocol version error", err)
	}
	wrong := httpsClient(t, p.other.Pool(), true)
	_, err := call(wrong, "GET", s.base+"/health", "")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("GET /health trusting another CA = %v, want x509: certificate signed by unknown authority", err)
	}
}

// authWith writes an auth file of entries (JSON objects) into dir.
func authWith(t *testing.T, path string, entries ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(`{"tokens":[`+strings.Join(entries, ",")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
}

const (
	idTeamA  = `{"tenant":"team-a","identity":"uri:spiffe://dlock.test/team-a","prefixes":["team-a/"],"access":"read-write"}`
	idReader = `{"tenant":"ops","identity":"dns:reader.dlock.test","prefixes":[""],"access":"read-only"}`
	idLegacy = `{"tenant":"legacy","identity":"cn:legacy-batch","prefixes":["legacy/"],"access":"read-write"}`
)

// TestMutualTLS: without a client certificate, or with one of another
// CA, the handshake fails; a certificate's identity gets its entry's
// scope and access (403 out of scope, 403 read only); a bearer token and
// a certificate of different tenants are refused; a revoked identity is
// refused on its next request, on the same connection.
func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	authPath := filepath.Join(p.dir, "auth.json")
	tokB := "team-b-token"
	entryB := `{"tenant":"team-b","sha256":"` + HashToken(tokB) + `","prefixes":["team-b/"],"access":"read-write"}`
	authWith(t, authPath, idTeamA, idReader, idLegacy, entryB)
	s := startTLS(t, Config{TLSCert: p.certFile, TLSKey: p.keyOut, ClientCA: p.caFile, AuthFile: authPath,
		SnapshotInterval: 50 * time.Millisecond})

	for _, tc := range []struct {
		what  string
		certs []tls.Certificate
		want  string
	}{
		{"no client certificate", nil, "certificate required|handshake failure"}, // TLS 1.3|1.2
		{"a certificate of another CA", []tls.Certificate{issue(t, p.other, tlstest.Leaf{URIs: []string{"spiffe://dlock.test/team-a"}})}, "unknown certificate authority"},
	} {
		for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			if err := handshake(s.base, p.ca.Pool(), version, tc.certs); err == nil || !regexp.MustCompile(tc.want).MatchString(err.Error()) {
				t.Errorf("handshake (TLS %x) with %s = %v, want %q", version, tc.what, err, tc.want)
			}
		}
	}
	mustCall(t, httpsClient(t, p.ca.Pool(), true, issue(t, p.ca, tlstest.Leaf{CN: "any"})), 200, "GET", s.base+"/health", "")

	teamA := httpsClient(t, p.ca.Pool(), true, issue(t, p.ca, tlstest.Leaf{CN: "ignored", DNS: []string{"ignored.test"}, URIs: []string{"spiffe://dlock.test/team-a"}}))
	reader := httpsClient(t, p.ca.Pool(), false, issue(t, p.ca, tlstest.Leaf{CN: "ignored", DNS: []string{"reader.dlock.test"}}))
	legacy := httpsClient(t, p.ca.Pool(), false, issue(t, p.ca, tlstest.Leaf{CN: "legacy-batch"}))
	nobody := httpsClient(t, p.ca.Pool(), false, issue(t, p.ca, tlstest.Leaf{URIs: []string{"spiffe://dlock.test/nobody"}}))
	twoURIs := httpsClient(t, p.ca.Pool(), false, issue(t, p.ca, tlstest.Leaf{URIs: []string{"spiffe://dlock.test/team-a", "spiffe://dlock.test/b"}}))

	r := mustCall(t, teamA, 200, "POST", s.base+"/v1/locks/team-a%2Fx/acquire", `{"ttlMs":30000}`)
	tok := r.body["token"].(string)
	mustCall(t, teamA, 200, "POST", s.base+"/v1/locks/team-a%2Fx/extend", `{"token":"`+tok+`"}`)
	if r := mustCall(t, teamA, 403, "POST", s.base+"/v1/locks/team-b%2Fx/acquire", `{"ttlMs":30000}`); r.body["error"] != "out of scope" {
		t.Errorf("team-a certificate acquiring team-b/x: %v, want out of scope", r.body)
	}
	if r := mustCall(t, reader, 403, "POST", s.base+"/v1/locks/team-a%2Fy/acquire", `{"ttlMs":30000}`); r.body["error"] != "read only" {
		t.Errorf("read-only certificate acquiring: %v, want read only", r.body)
	}
	mustCall(t, reader, 200, "GET", s.base+"/v1/locks/team-a%2Fx", "")
	mustCall(t, legacy, 200, "POST", s.base+"/v1/locks/legacy%2Fjob/acquire", `{"ttlMs":30000}`)
	if r := mustCall(t, nobody, 401, "GET", s.base+"/v1/locks", ""); !strings.Contains(r.body["message"].(string), `"uri:spiffe://dlock.test/nobody" is not in the auth file`) {
		t.Errorf("unmapped certificate: %v, want 401 naming its identity", r.body)
	}
	if r := mustCall(t, twoURIs, 401, "GET", s.base+"/v1/locks", ""); !strings.Contains(r.body["message"].(string), "2 URI SANs") {
		t.Errorf("certificate with two URI SANs: %v, want 401 naming why", r.body)
	}
	// Token and certificate: the same tenant is fine (the token's entry
	// applies), different tenants are refused, a wrong token is refused.
	if r := mustCall(t, teamA, 403, "GET", s.base+"/v1/locks", "", "Authorization", "Bearer "+tokB); r.body["error"] != "tenant mismatch" {
		t.Errorf("team-a certificate with team-b's token: %v, want tenant mismatch", r.body)
	}
	mustCall(t, nobody, 200, "POST", s.base+"/v1/locks/team-b%2Fx/acquire", `{"ttlMs":30000}`, "Authorization", "Bearer "+tokB)
	mustCall(t, teamA, 401, "GET", s.base+"/v1/locks", "", "Authorization", "Bearer wrong")

	// Revocation: team-a leaves the file; its next request on the same
	// keep-alive connection is refused, and it cannot release.
	var conns []string
	trace := func(c *http.Client) {
		c.Transport.(*http.Transport).TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
			conns = append(conns, "handshake")
			return nil
		}
	}
	trace(teamA)
	// team-a's event stream, on a connection of its own, ends at the reload.
	streamClient := httpsClient(t, p.ca.Pool(), false, issue(t, p.ca, tlstest.Leaf{URIs: []string{"spiffe://dlock.test/team-a"}}))
	stream, err := streamClient.Get(s.base + "/v1/events")
	if err != nil || stream.StatusCode != 200 {
		t.Fatalf("team-a GET /v1/events = %v, %v", stream, err)
	}
	defer stream.Body.Close()
	// Snapshots come every 50ms; after the reload at most the one of a
	// tick in progress may follow before the stream ends.
	var reloaded atomic.Bool
	var late atomic.Int64
	streamEnded := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
			if reloaded.Load() && strings.HasPrefix(sc.Text(), "event: snapshot") {
				late.Add(1)
			}
		}
		streamEnded <- sc.Err()
	}()
	authWith(t, authPath, idReader, idLegacy, entryB)
	if err := s.srv.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	reloaded.Store(true)
	if r := mustCall(t, teamA, 401, "POST", s.base+"/v1/locks/team-a%2Fx/release", `{"token":"`+tok+`"}`); !strings.Contains(r.body["message"].(string), "not in the auth file") {
		t.Errorf("revoked identity: %v, want 401 naming it", r.body)
	}
	if len(conns) != 0 {
		t.Errorf("the revoked identity's request made %d new handshakes, want it on the open connection", len(conns))
	}
	select {
	case err := <-streamEnded:
		if err != nil || late.Load() > 1 {
			t.Errorf("the revoked identity's event stream ended with %v after %d snapshots past the reload, want a clean end after at most 1", err, late.Load())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the revoked identity's event stream still runs 30s after the reload")
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

// TestMutualTLSCNOnlyWithoutSAN: over HTTPS with client certificates, a
// certificate whose SubjectAltName holds only an e-mail address, only an
// IP address or only an otherName is not its CN: with only the CN's entry
// in the auth file, each gets 401 naming its identity or why it has none;
// once the file lists the e-mail and IP identities, those certificates
// get their entries' scopes, not the CN's.
func TestMutualTLSCNOnlyWithoutSAN(t *testing.T) {
	p := newPKI(t)
	authPath := filepath.Join(p.dir, "auth.json")
	authWith(t, authPath, idLegacy)
	s := startTLS(t, Config{TLSCert: p.certFile, TLSKey: p.keyOut, ClientCA: p.caFile, AuthFile: authPath})
	client := func(l tlstest.Leaf) *http.Client { return httpsClient(t, p.ca.Pool(), false, issue(t, p.ca, l)) }

	legacy := client(tlstest.Leaf{CN: "legacy-batch"})
	mail := client(tlstest.Leaf{CN: "legacy-batch", Emails: []string{"billing@dlock.test"}})
	ip := client(tlstest.Leaf{CN: "legacy-batch", IPs: []net.IP{net.IPv4(10, 0, 0, 7)}})
	other := client(tlstest.Leaf{CN: "legacy-batch", Extra: []pkix.Extension{otherNameSAN(t)}})

	mustCall(t, legacy, 200, "POST", s.base+"/v1/locks/legacy%2Fa/acquire", `{"ttlMs":30000}`)
	for _, tc := range []struct {
		what, want string
		c          *http.Client
	}{
		{"an e-mail SAN", `"email:billing@dlock.test" is not in the auth file`, mail},
		{"an IP SAN", `"ip:10.0.0.7" is not in the auth file`, ip},
		{"an otherName SAN", "has no URI, DNS, e-mail or IP name", other},
	} {
		r, err := call(tc.c, "POST", s.base+"/v1/locks/legacy%2Fb/acquire", `{"ttlMs":30000}`)
		if msg, _ := r.body["message"].(string); err != nil || r.code != 401 || !strings.Contains(msg, tc.want) {
			t.Errorf("certificate with CN legacy-batch and %s acquiring legacy/b = %d %v, %v; want 401 with %q (the CN does not count)", tc.what, r.code, r.body, err, tc.want)
		}
	}

	authWith(t, authPath, idLegacy,
		`{"tenant":"billing","identity":"email:billing@dlock.test","prefixes":["billing/"],"access":"read-write"}`,
		`{"tenant":"edge","identity":"ip:10.0.0.7","prefixes":["edge/"],"access":"read-write"}`)
	if err := s.srv.ReloadAuth(); err != nil {
		t.Fatalf("ReloadAuth = %v", err)
	}
	for _, tc := range []struct {
		what   string
		c      *http.Client
		inside string // a name in the identity's scope
	}{
		{"an e-mail SAN", mail, "billing%2Fa"},
		{"an IP SAN", ip, "edge%2Fa"},
	} {
		mustCall(t, tc.c, 200, "POST", s.base+"/v1/locks/"+tc.inside+"/acquire", `{"ttlMs":30000}`)
		if r := mustCall(t, tc.c, 403, "POST", s.base+"/v1/locks/legacy%2Fb/acquire", `{"ttlMs":30000}`); r.body["error"] != "out of scope" {
			t.Errorf("certificate with CN legacy-batch and %s acquiring legacy/b: %v, want out of scope", tc.what, r.body)
		}
	}
}

// handshake completes a TLS handshake as a client presenting certs (even
// to a server that asks for other CAs) and reads the server's first
// record: under TLS 1.3 a refused client certificate shows there.
func handshake(base string, roots *x509.CertPool, version uint16, certs []tls.Certificate) error {
	c, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{
		RootCAs: roots, MinVersion: version, MaxVersion: version, ServerName: "127.0.0.1",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if len(certs) == 0 {
				return &tls.Certificate{}, nil
			}
			return &certs[0], nil
		},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

// serverSerial returns the serial of the certificate a new handshake sees.
func serverSerial(t *testing.T, base string, roots *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestTLSReload: a new certificate is used by new handshakes while an open
// connection keeps going; an expired certificate, a key of another
// certificate and a missing file are refused, the one in force kept.
func TestTLSReload(t *testing.T) {
	p := newPKI(t)
	s := startTLS(t, Config{TLSCert: p.certFile, TLSKey: p.keyOut})
	roots := p.ca.Pool()
	first := serverSerial(t, s.base, roots)
	c := httpsClient(t, roots, true)
	mustCall(t, c, 200, "GET", s.base+"/health", "")

	next, err := p.ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := next.WriteFiles(p.dir, "server"); err != nil {
		t.Fatal(err)
	}
	if err := s.srv.ReloadTLS(); err != nil {
		t.Fatalf("ReloadTLS = %v", err)
	}
	if got := serverSerial(t, s.base, roots); got != next.Cert.SerialNumber.String() || got == first {
		t.Errorf("after a reload, a new handshake sees serial %s; want the new %s (old %s)", got, next.Cert.SerialNumber, first)
	}
	r := mustCall(t, c, 200, "GET", s.base+"/health", "")
	if got := r.state.PeerCertificates[0].SerialNumber.String(); got != first {
		t.Errorf("the open HTTP/2 connection shows serial %s, want the one it was opened with, %s", got, first)
	}

	expired, err := p.ca.Issue(tlstest.Leaf{DNS: []string{"localhost"}, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	other, err := p.ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what, want string
		write      func()
	}{
		{"an expired certificate", "expired at", func() { expired.WriteFiles(p.dir, "server") }},
		{"a key of another certificate", "private key does not match", func() {
			os.WriteFile(p.keyOut, other.KeyPEM, 0o600)
		}},
		{"a missing file", "no such file", func() { os.Remove(p.certFile) }},
	} {
		tc.write()
		err := s.srv.ReloadTLS()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReloadTLS with %s = %v, want an error with %q", tc.what, err, tc.want)
		}
		if got := serverSerial(t, s.base, roots); got != next.Cert.SerialNumber.String() {
			t.Errorf("after a refused reload (%s), a new handshake sees serial %s, want the one in force, %s", tc.what, got, next.Cert.SerialNumber)
		}
	}
}

// TestTLSBadInput: plain HTTP to the TLS port gets a 400 and a close; a
// truncated handshake and a handshake sent a byte at a time are closed
// by the handshake timeout; the service answers throughout.
func TestTLSBadInput(t *testing.T) {
	p := newPKI(t)
	s := startTLS(t, Config{TLSCert: p.certFile, TLSKey: p.keyOut})
	addr := strings.TrimPrefix(s.base, "https://")
	c := httpsClient(t, p.ca.Pool(), true)

	plain, err := http.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatalf("plain HTTP to the TLS port: %v", err)
	}
	plain.Body.Close()
	if plain.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS port = %d, want 400", plain.StatusCode)
	}

	// A real ClientHello, recorded, to truncate and to dribble.
	hello := recordClientHello(t)
	truncated := dialRaw(t, addr)
	truncated.Write(hello[:len(hello)/2])
	slow := dialRaw(t, addr)
	stopDribble := make(chan struct{})
	dribbled := make(chan error, 1)
	go func() {
		for i := range hello {
			select {
			case <-stopDribble:
				dribbled <- nil
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := slow.Write(hello[i : i+1]); err != nil {
				dribbled <- err
				return
			}
		}
		dribbled <- nil
	}()
	mustCall(t, c, 200, "GET", s.base+"/health", "") // serving while both hang
	for what, conn := range map[string]net.Conn{"truncated handshake": truncated, "slowloris handshake": slow} {
		conn.SetReadDeadline(time.Now().Add(60 * time.Second)) // a bound, far above the 5s handshake timeout
		n, err := conn.Read(make([]byte, 1024))
		if !errors.Is(err, io.EOF) && !isReset(err) {
			t.Errorf("%s: read %d bytes, %v; want the server to close it", what, n, err)
		}
	}
	close(stopDribble)
	<-dribbled
	mustCall(t, c, 200, "POST", s.base+"/v1/locks/after-bad-input/acquire", `{"ttlMs":30000}`)
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// recordClientHello returns the bytes a Go client sends to open a TLS
// handshake.
func recordClientHello(t *testing.T) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		tls.Client(a, &tls.Config{ServerName: "localhost"}).Handshake()
		a.Close()
	}()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(b, buf); err != nil {
		t.Fatal(err)
	}
	n := int(buf[3])<<8 | int(buf[4])
	rest := make([]byte, n)
	if _, err := io.ReadFull(b, rest); err != nil {
		t.Fatal(err)
	}
	b.Close()
	return append(buf, rest...)
}

// TestPlaintextWarning: the warning that tokens travel in clear is logged
// for a non-loopback address with a token and without TLS, and only then.
func TestPlaintextWarning(t *testing.T) {
	any4 := &net.TCPAddr{IP: net.IPv4zero, Port: 3009}
	lo := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3009}
	for _, tc := range []struct {
		addr net.Addr
		cfg  Config
		warn bool
	}{
		{any4, Config{AuthToken: "t"}, true},
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1}, Config{AuthToken: "t"}, true},
		{lo, Config{AuthToken: "t"}, false},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 1}, Config{AuthToken: "t"}, false},
		{any4, Config{}, false},
	} {
		var out lockedBuf
		s := &Server{cfg: tc.cfg, log: slog.New(slog.NewTextHandler(&out, nil))}
		s.warnPlaintext(tc.addr)
		if got := strings.Contains(out.String(), "travel in clear"); got != tc.warn {
			t.Errorf("warnPlaintext(%v, token %v) logged %q; want a warning: %v", tc.addr, tc.cfg.AuthToken != "", out.String(), tc.warn)
		}
	}
	p := newPKI(t)
	var out lockedBuf
	st, err := auth.NewTLS(p.certFile, p.keyOut, "")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{AuthToken: "t"}, log: slog.New(slog.NewTextHandler(&out, nil)), tls: st}
	s.warnPlaintext(any4)
	if out.String() != "" {
		t.Errorf("warnPlaintext with TLS logged %q, want nothing", out.String())
	}
}

// TestTLSReloadEndsResumption: a session resumes across connections, but
// not across a reload, so a client certificate is verified again under
// the client CA then in force.
func TestTLSReloadEndsResumption(t *testing.T) {
	p := newPKI(t)
	s := startTLS(t, Config{TLSCert: p.certFile, TLSKey: p.keyOut, ClientCA: p.caFile})
	cert := issue(t, p.ca, tlstest.Leaf{CN: "client"})
	cache := tls.NewLRUClientSessionCache(8)
	resumed := func() bool {
		t.Helper()
		c, err := tls.Dial("tcp", strings.TrimPrefix(s.base, "https://"), &tls.Config{
			RootCAs: p.ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}, ClientSessionCache: cache})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer c.Close()
		// A request and its answer: TLS 1.3 tickets arrive after the handshake.
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		io.Copy(io.Discard, c)
		return c.ConnectionState().DidResume
	}
	resumed()
	if !resumed() {
		t.Fatal("a second connection did not resume the session; the test cannot tell anything")
	}
	if err := s.srv.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if resumed() {
		t.Error("a connection after a reload resumed a session of before it, want a full handshake")
	}
}

// anyAddrListener is a loopback listener that reports the unspecified
// address, as one of ":3009" would.
type anyAddrListener struct{ net.Listener }

func (anyAddrListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4zero, Port: 3009} }

// TestServeWarnsPlaintext: Serve logs the warning for a listener beyond
// loopback, with a token and without TLS.
func TestServeWarnsPlaintext(t *testing.T) {
	l, err := dlock.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out lockedBuf
	srv, err := New(l, Config{AuthToken: "t", Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, anyAddrListener{ln}) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "dlock: serving") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // poll interval of a deadline-bounded wait
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "travel in clear") {
		t.Errorf("Serve on 0.0.0.0 with a token and no TLS logged:\n%s\nwant the warning that tokens travel in clear", out.String())
	}
}
