package server

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
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
//  3. the subject common name ("cn:billing"): the legacy field, used only
//     when the certificate has no SAN at all (RFC 6125 deprecates it for
//     names, and Go ignores it when verifying servers).
//
// A higher class hides the lower ones, so a certificate has one identity
// whatever else it carries; two values of the winning class are
// ambiguous and the certificate stands for no one. The class is part of
// the identity, so a CN can never pass for a URI or DNS entry.

// identityClasses are the prefixes of an auth file's "identity".
var identityClasses = []string{"uri:", "dns:", "cn:"}

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
	case c.Subject.CommonName != "":
		return "cn:" + c.Subject.CommonName, nil
	}
	return "", errors.New("the client certificate has no URI SAN, DNS SAN or subject CN")
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
			return fmt.Errorf(`%s.identity must be "uri:URI", "dns:NAME" or "cn:NAME" (at most 1024 bytes)`, where)
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
func (st *authState) lookup(e authEntry) *principal {
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
func (st *authState) add(e authEntry, p *principal) {
	if e.Identity != "" {
		p.identity = e.Identity
		st.byIdentity[e.Identity] = p
		return
	}
	p.hash = entryHash(e)
	st.byHash[p.hash] = p
}

// principals calls fn with every entry of st.
func (st *authState) principals(fn func(*principal)) {
	for _, p := range st.byHash {
		fn(p)
	}
	for _, p := range st.byIdentity {
		fn(p)
	}
}

// has reports whether p (looked up earlier) is still in st.
func (st *authState) has(p *principal) bool {
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
func (s *Server) principalOf(r *http.Request) (*principal, *apiError) {
	st := s.auth.Load()
	var byToken *principal
	tok, hasToken := bearer(r)
	if hasToken {
		// Keyed by the token's SHA-256: a lookup's timing tells nothing
		// useful about a token.
		if byToken = st.byHash[sha256.Sum256([]byte(tok))]; byToken == nil {
			return nil, unauthorizedError("missing or wrong bearer token")
		}
	}
	byCert, certErr := s.certPrincipal(r, st)
	switch {
	case byToken != nil && byCert != nil && byToken.tenant != byCert.tenant:
		return nil, &apiError{Status: http.StatusForbidden, Error: "tenant mismatch",
			Message: fmt.Sprintf("the bearer token is tenant %q and the client certificate tenant %q; send the credentials of one tenant", byToken.tenant, byCert.tenant)}
	case byToken != nil:
		return byToken, nil
	case byCert != nil:
		return byCert, nil
	case certErr != nil:
		return nil, unauthorizedError(certErr.Error() + ", and no bearer token")
	}
	return nil, unauthorizedError("missing or wrong bearer token")
}

// certPrincipal returns the entry of the request's verified client
// certificate; nil and no error without one (plain HTTP, or no client CA).
func (s *Server) certPrincipal(r *http.Request, st *authState) (*principal, error) {
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

func unauthorizedError(msg string) *apiError {
	return &apiError{Status: http.StatusUnauthorized, Error: "unauthorized", Message: msg}
}
