package auth

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Client-certificate identities (mutual TLS, Config.ClientCA): an auth file
// entry names either a token's "sha256" or a certificate's "identity", and
// grants either the same scope, access and limits.
//
// The identity of a verified client certificate is taken from the first
// of these classes it carries, and the certificate must carry exactly one
// value of that class:
//
//  1. a URI SAN ("uri:spiffe://example.org/ns/prod/sa/billing"): what
//     SPIFFE, service meshes and most workload CAs issue, one per
//     certificate by the SPIFFE rules; made to name a workload;
//  2. a DNS SAN ("dns:billing.prod.internal"): what an ordinary internal
//     CA puts in a certificate;
//  3. an e-mail SAN ("email:billing@example.org"): what a CA that names
//     people or service accounts by mailbox issues;
//  4. an IP SAN ("ip:10.0.0.7", "ip:2001:db8::7", in Go's net.IP form):
//     the weakest name, since an address passes from host to host;
//  5. the subject common name ("cn:billing"): the legacy field, used only
//     when the certificate has no SubjectAltName extension at all (RFC 6125
//     deprecates it for names, and Go ignores it when verifying servers).
//     A certificate with the extension but none of the four names above
//     (say only an otherName) stands for no one: its CN does not count.
//
// A higher class hides the lower ones, so a certificate has one identity
// whatever else it carries; two values of the winning class are
// ambiguous and the certificate stands for no one. The class is part of
// the identity, so a CN can never pass for a SAN entry.

// identityClasses are the prefixes of an auth file's "identity".
var identityClasses = []string{"uri:", "dns:", "email:", "ip:", "cn:"}

// oidSubjectAltName is the SubjectAltName extension (RFC 5280 4.2.1.6).
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// certIdentity returns the identity of a verified client certificate.
func certIdentity(c *x509.Certificate) (string, error) {
	switch {
	case len(c.URIs) == 1:
		return "uri:" + c.URIs[0].String(), nil
	case len(c.URIs) > 1:
		return "", fmt.Errorf("the client certificate has %d URI SANs; one is needed to name it", len(c.URIs))
	case len(c.DNSNames) == 1:
		return "dns:" + c.DNSNames[0], nil
	case len(c.DNSNames) > 1:
		return "", fmt.Errorf("the client certificate has %d DNS SANs and no URI SAN; one is needed to name it", len(c.DNSNames))
	case len(c.EmailAddresses) == 1:
		return "email:" + c.EmailAddresses[0], nil
	case len(c.EmailAddresses) > 1:
		return "", fmt.Errorf("the client certificate has %d e-mail SANs and no URI or DNS SAN; one is needed to name it", len(c.EmailAddresses))
	case len(c.IPAddresses) == 1:
		return "ip:" + c.IPAddresses[0].String(), nil
	case len(c.IPAddresses) > 1:
		return "", fmt.Errorf("the client certificate has %d IP SANs and no URI, DNS or e-mail SAN; one is needed to name it", len(c.IPAddresses))
	case hasSANExtension(c):
		return "", errors.New("the client certificate's SubjectAltName extension has no URI, DNS, e-mail or IP name, and its subject CN counts only without the extension")
	case c.Subject.CommonName != "":
		return "cn:" + c.Subject.CommonName, nil
	}
	return "", errors.New("the client certificate has no SubjectAltName and no subject CN")
}

// hasSANExtension reports whether c carries a SubjectAltName extension,
// whatever names it holds.
func hasSANExtension(c *x509.Certificate) bool {
	for _, e := range c.Extensions {
		if e.Id.Equal(oidSubjectAltName) {
			return true
		}
	}
	return false
}

// checkEntryKey validates the credential of an auth file entry: exactly
// one of sha256 and identity, not repeated.
func checkEntryKey(e authEntry, where string, seen map[string]bool) error {
	switch {
	case e.SHA256 != "" && e.Identity != "":
		return fmt.Errorf("%s: set sha256 (a token) or identity (a client certificate), not both", where)
	case e.Identity != "":
		ok := false
		for _, c := range identityClasses {
			ok = ok || (strings.HasPrefix(e.Identity, c) && len(e.Identity) > len(c))
		}
		if !ok || len(e.Identity) > 1024 {
			return fmt.Errorf(`%s.identity must be "uri:URI", "dns:NAME", "email:ADDRESS", "ip:ADDRESS" or "cn:NAME" (at most 1024 bytes)`, where)
		}
		if ip, ok := strings.CutPrefix(e.Identity, "ip:"); ok {
			// Matching is byte for byte: an address must be written as
			// the certificate's is read (net.IP.String).
			if a, err := netip.ParseAddr(ip); err != nil || a.Zone() != "" || a.Unmap().String() != ip {
				return fmt.Errorf(`%s.identity %q must be an IP address in its canonical form ("ip:10.0.0.7", "ip:2001:db8::7")`, where, e.Identity)
			}
		}
		if seen["id "+e.Identity] {
			return fmt.Errorf("%s.identity repeats an earlier entry's", where)
		}
		seen["id "+e.Identity] = true
		return nil
	}
	if len(e.SHA256) != 64 {
		return fmt.Errorf("%s.sha256 must be 64 hexadecimal characters (dlock auth hash prints it), or set identity", where)
	}
	if _, err := hex.DecodeString(e.SHA256); err != nil {
		return fmt.Errorf("%s.sha256 must be 64 hexadecimal characters (dlock auth hash prints it)", where)
	}
	h := strings.ToLower(e.SHA256)
	if seen[h] {
		return fmt.Errorf("%s.sha256 repeats an earlier entry's", where)
	}
	seen[h] = true
	return nil
}

// lookup returns the entry of e in st, nil when it has none.
func (st *authState) lookup(e authEntry) *Principal {
	if st == nil {
		return nil
	}
	if e.Identity != "" {
		return st.byIdentity[e.Identity]
	}
	return st.byHash[entryHash(e)]
}

func entryHash(e authEntry) [sha256.Size]byte {
	var key [sha256.Size]byte
	_, _ = hex.Decode(key[:], []byte(strings.ToLower(e.SHA256))) // checked when the file was read (checkEntryKey)
	return key
}

// add puts p, made of e, into st.
func (st *authState) add(e authEntry, p *Principal) {
	if e.Identity != "" {
		p.identity = e.Identity
		st.byIdentity[e.Identity] = p
		return
	}
	p.hash = entryHash(e)
	st.byHash[p.hash] = p
}

// principals calls fn with every entry of st.
func (st *authState) principals(fn func(*Principal)) {
	for _, p := range st.byHash {
		fn(p)
	}
	for _, p := range st.byIdentity {
		fn(p)
	}
}

// has reports whether p (looked up earlier) is still in st.
func (st *authState) has(p *Principal) bool {
	if p.identity != "" {
		return st.byIdentity[p.identity] != nil
	}
	return st.byHash[p.hash] != nil
}

// principalOf finds the principal of a request with an auth file: by its
// bearer token, by its verified client certificate, or both when they
// name the same tenant (the token's entry then applies: it is the finer
// credential, say a read-only token of a service whose certificate may
// write). A wrong token is refused even with a good certificate.
func (g *Gate) principalOf(r *http.Request) (*Principal, *Refusal) {
	st := g.state.Load()
	var byToken *Principal
	tok, hasToken := bearer(r)
	if hasToken {
		// Keyed by the token's SHA-256: a lookup's timing tells nothing
		// useful about a token.
		if byToken = st.byHash[sha256.Sum256([]byte(tok))]; byToken == nil {
			return nil, unauthorized("missing or wrong bearer token")
		}
	}
	byCert, certErr := certPrincipal(r, st)
	switch {
	case byToken != nil && byCert != nil && byToken.tenant != byCert.tenant:
		return nil, &Refusal{Status: http.StatusForbidden, Code: "tenant mismatch",
			Message: fmt.Sprintf("the bearer token is tenant %q and the client certificate tenant %q; send the credentials of one tenant", byToken.tenant, byCert.tenant)}
	case byToken != nil:
		return byToken, nil
	case byCert != nil:
		return byCert, nil
	case certErr != nil:
		return nil, unauthorized(certErr.Error() + ", and no bearer token")
	}
	return nil, unauthorized("missing or wrong bearer token")
}

// certPrincipal returns the entry of the request's verified client
// certificate; nil and no error without one (plain HTTP, or no client CA).
func certPrincipal(r *http.Request, st *authState) (*Principal, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
		return nil, nil
	}
	id, err := certIdentity(r.TLS.PeerCertificates[0])
	if err != nil {
		return nil, err
	}
	if p := st.byIdentity[id]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("the client certificate's identity %q is not in the auth file", id)
}
