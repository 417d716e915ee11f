package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server/auth"
)

// Route scopes: what each /api and /v1 route asks of a scoped credential
// (package auth says whose it is), and the limits of holds.

// routeScope says what a route needs of a scoped token.
type routeScope struct {
	param   string // path parameter holding the lock name; "" for none
	names   bool   // the JSON body's "names" are the lock names (multi-locks)
	write   bool   // refused to read-only tokens
	acquire bool   // counts against acquiresPerSecond
	demo    bool   // a demo operation: a hold for as long as the request runs
	admin   bool   // refused to credentials without admin access
}

// routeScopes are the /api and /v1 routes a scoped token may use. Any
// other /api or /v1 route is refused to scoped tokens (fail closed), so a
// new route must be listed here to be open to them. The list and the event
// stream show only names in scope (see list and handleEvents).
var routeScopes = map[string]routeScope{
	"POST /api/locks/{pattern}/{resourceId}": {param: "resourceId", write: true, acquire: true, demo: true},
	"POST /v1/locks/{name}/acquire":          {param: "name", write: true, acquire: true},
	"POST /v1/locks/{name}/extend":           {param: "name", write: true},
	"POST /v1/locks/{name}/release":          {param: "name", write: true},
	"POST /v1/locks/{name}/force-release":    {param: "name", write: true, admin: true},
	"GET /v1/locks/{name}":                   {param: "name"},
	"GET /v1/locks":                          {},
	"GET /v1/events":                         {},
	"POST /v1/elections/{name}/campaign":     {param: "name", write: true, acquire: true},
	"POST /v1/elections/{name}/extend":       {param: "name", write: true},
	"POST /v1/elections/{name}/resign":       {param: "name", write: true},
	"GET /v1/elections/{name}":               {param: "name"},
	"GET /v1/elections/{name}/observe":       {param: "name"},
	"POST /v1/multi/acquire":                 {names: true, write: true, acquire: true},
	"POST /v1/multi/extend":                  {names: true, write: true},
	"POST /v1/multi/release":                 {names: true, write: true},
}

// guard wraps the handler of pattern with the scope and limit checks of
// the request's principal (none without an auth file), and counts the
// request in the tenant's metrics.
func (s *Server) guard(pattern string, h http.Handler) http.Handler {
	if !needsAuth(patternPath(pattern)) {
		return h
	}
	scope, listed := routeScopes[pattern]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := auth.FromContext(r.Context())
		if p == nil {
			h.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		defer func() { s.gate.CountRequest(p, sw.status()) }()
		if reason, e := scope.check(r, p, listed); e != nil {
			if reason != "" {
				p.Deny(reason)
			}
			writeAPIError(sw, e)
			return
		}
		if scope.demo {
			if !p.Reserve(1, true) {
				p.Deny("holds_limit")
				writeAPIError(sw, holdsLimitError(p, 1))
				return
			}
			defer p.EndDemo()
		}
		h.ServeHTTP(sw, r)
	})
}

// check judges r, a request of p on a route of this scope (listed: in
// routeScopes), by scope, access and rate. It returns the refusal, with
// the reason it is counted under ("" for a body that cannot be read).
func (scope routeScope) check(r *http.Request, p *auth.Principal, listed bool) (string, *apiError) {
	name := ""
	if scope.param != "" {
		name = r.PathValue(scope.param)
	}
	switch {
	case !listed:
		return "out_of_scope", &apiError{Status: http.StatusForbidden, Error: "forbidden",
			Message: fmt.Sprintf("tenant %q: this endpoint is not open to scoped credentials (%s)", p.Tenant(), p.Credential())}
	case scope.write && p.ReadOnly():
		return "read_only", &apiError{Status: http.StatusForbidden, Error: "read only",
			Message: fmt.Sprintf("tenant %q: %s is read-only", p.Tenant(), p.Credential())}
	case scope.admin && !p.Admin():
		return "not_admin", &apiError{Status: http.StatusForbidden, Error: "not admin",
			Message: fmt.Sprintf("tenant %q: this endpoint needs admin access, which %s does not have", p.Tenant(), p.Credential())}
	case scope.param != "" && !p.Allows(name):
		return "out_of_scope", &apiError{Status: http.StatusForbidden, Error: "out of scope", Field: scope.param,
			Message: fmt.Sprintf("tenant %q: lock %q is outside the name prefixes of %s", p.Tenant(), name, p.Credential())}
	}
	if scope.names {
		names, e := bodyNames(r)
		if e != nil {
			// Fail closed: a body whose names cannot be read passes no
			// scope check; it gets the answer its handler would give it
			// (400 naming the problem, or 413).
			return "", e
		}
		for _, n := range names {
			if !p.Allows(n) {
				return "out_of_scope", &apiError{Status: http.StatusForbidden, Error: "out of scope", Field: "names", Name: n,
					Message: fmt.Sprintf("tenant %q: lock %q is outside the name prefixes of %s", p.Tenant(), n, p.Credential())}
			}
		}
	}
	if scope.acquire {
		if wait, ok := p.Take(time.Now()); !ok {
			ms := durationMs(wait)
			return "rate_limit", &apiError{Status: http.StatusTooManyRequests, Error: "rate limited", RetryAfterMs: &ms,
				Message: fmt.Sprintf("tenant %q: over the %g acquires per second of %s", p.Tenant(), p.Rate(), p.Credential())}
		}
	}
	return "", nil
}

func holdsLimitError(p *auth.Principal, n int) *apiError {
	one := int64(1000)
	msg := fmt.Sprintf("tenant %q: %s already holds its limit of %d locks", p.Tenant(), p.Credential(), p.MaxHolds())
	if n > 1 {
		msg = fmt.Sprintf("tenant %q: %d more locks would pass the limit of %d of %s", p.Tenant(), n, p.MaxHolds(), p.Credential())
	}
	return &apiError{Status: http.StatusTooManyRequests, Error: "too many holds", RetryAfterMs: &one, Message: msg}
}

// reserveHold books a /v1 hold for the request's principal before an
// acquire. The returned func must be called with the granted lease, or
// nil when the acquire failed.
func (s *Server) reserveHold(ctx context.Context) (func(*dlock.Lease), *apiError) {
	claim, e := s.reserveHolds(ctx, 1)
	if e != nil {
		return nil, e
	}
	return func(ls *dlock.Lease) {
		if ls == nil {
			claim(nil)
			return
		}
		claim(ls.Done())
	}, nil
}

// reserveHolds books n /v1 holds (a multi-lock's names) for the request's
// principal. The returned func must be called with the Done channel of
// the grant, or nil when the acquire failed.
func (s *Server) reserveHolds(ctx context.Context, n int) (func(done <-chan struct{}), *apiError) {
	p := auth.FromContext(ctx)
	if p == nil {
		return func(<-chan struct{}) {}, nil
	}
	if !p.Reserve(n, false) {
		p.Deny("holds_limit")
		return nil, holdsLimitError(p, n)
	}
	return func(done <-chan struct{}) { p.Claim(n, done) }, nil
}

// bodyNames returns the "names" listed by the request's JSON body, and
// puts the body back for the handler, with the read error (a body over
// MaxBodyBytes) at its end. A body that is not one JSON object whose
// "names", if any, is a list of strings (read by decodeJSON's rules, other
// fields ignored: the handler judges those) lists no names that could be
// checked: bodyNames then returns the 400 or 413 that says why.
func bodyNames(r *http.Request) ([]string, *apiError) {
	data, err := io.ReadAll(r.Body)
	var rest io.Reader = bytes.NewReader(nil)
	if err != nil {
		rest = errReader{err}
	}
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(data), rest))
	var b struct {
		Names []string `json:"names"`
	}
	if e := decodeOne(json.NewDecoder(io.MultiReader(bytes.NewReader(data), rest)), &b, false); e != nil {
		return nil, e
	}
	return b.Names, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func patternPath(pattern string) string {
	if _, path, ok := strings.Cut(pattern, " "); ok {
		return path
	}
	return pattern
}

// authenticate checks the credentials of an /api or /v1 request. With an
// auth file it returns the request with its principal; with a single
// token (Config.AuthToken) the request as it is. On failure it writes the
// 401 (or 403) and returns false.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	p, e := s.gate.Principal(r) // a token, a client certificate or both
	if e != nil {
		if e.Status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dlock"`)
		}
		writeAPIError(w, &apiError{Status: e.Status, Error: e.Code, Message: e.Message})
		return r, false
	}
	if p == nil {
		return r, true
	}
	return r.WithContext(auth.NewContext(r.Context(), p)), true
}

// revoked reports whether p's credential left the auth file in a reload
// since p was looked up. A nil principal is never revoked.
func (s *Server) revoked(p *auth.Principal) bool { return s.gate.Revoked(p) }

// ReloadAuth reads Config.AuthFile again: tokens added work at once,
// tokens removed get 401 from their next request; open connections and
// leases are kept. On an error the previous file stays in force. Without
// an auth file it does nothing.
func (s *Server) ReloadAuth() error {
	if s.cfg.AuthFile == "" {
		return nil
	}
	tenants, err := s.gate.Reload()
	if err != nil {
		return err
	}
	s.log.Info("dlock: auth file reloaded", "tenants", tenants)
	return nil
}

// HashToken returns the hex SHA-256 of a token, as an auth file lists it.
func HashToken(token string) string { return auth.HashToken(token) }

// ReloadTLS reads the TLS certificate, its key and the client CA again.
// Handshakes from then on use them; open connections are kept. A file that
// cannot be read, a key that does not match, or a certificate that is
// expired or not yet valid is an error, and the previous material stays in
// force. Without TLS it does nothing.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	leaf, err := s.tls.Reload()
	if err != nil {
		return err
	}
	s.log.Info("dlock: TLS certificate reloaded", "subject", leaf.Subject.String(),
		"notAfter", leaf.NotAfter.UTC().Format(time.RFC3339), "clientCA", s.tls.HasClientCA())
	return nil
}

// warnPlaintext logs that tokens travel in clear when the service listens
// beyond loopback without TLS and with bearer tokens.
func (s *Server) warnPlaintext(addr net.Addr) {
	if s.tls != nil || (s.cfg.AuthToken == "" && s.cfg.AuthFile == "") {
		return
	}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsLoopback() {
		return
	}
	s.log.Warn("dlock: listening beyond loopback without TLS: bearer tokens and lease tokens travel in clear; set --tls-cert and --tls-key (docs/operations.md)",
		"addr", addr.String())
}
