package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/prometheus/client_golang/prometheus"
)

// Scoped tokens (Config.AuthFile, docs/operations.md): a JSON file lists
// tokens by their SHA-256 (or client certificates by their identity,
// identity.go), each with a tenant, the lock-name prefixes it
// may touch, read-only or read-write access, and optional limits on
// concurrent holds and acquires per second. The file is read by New and
// again by ReloadAuth (SIGHUP in dlock serve).

// authFile is the JSON of an auth file.
type authFile struct {
	Tokens []authEntry `json:"tokens"`
}

type authEntry struct {
	Tenant   string   `json:"tenant"`
	SHA256   string   `json:"sha256"`
	Identity string   `json:"identity"` // a client certificate instead of a token (identity.go)
	Prefixes []string `json:"prefixes"`
	Access   string   `json:"access"` // read-only or read-write
	// MaxHolds bounds the leases the token holds at once through this
	// server (/v1 leases and running demo operations); 0 is no limit.
	MaxHolds int `json:"maxHolds"`
	// AcquiresPerSecond bounds the token's acquires (and demo requests);
	// a burst of one second's worth is allowed; 0 is no limit.
	AcquiresPerSecond float64 `json:"acquiresPerSecond"`
}

// maxAuthFileBytes bounds an auth file.
const maxAuthFileBytes = 8 << 20

var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// parseAuthFile reads and validates an auth file. Errors name the entry
// and the field; no token or hash appears in them.
func parseAuthFile(data []byte) ([]authEntry, error) {
	if len(data) > maxAuthFileBytes {
		return nil, fmt.Errorf("over %d bytes", maxAuthFileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f authFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a valid auth file: %v", err)
	}
	if dec.More() {
		return nil, errors.New("not a valid auth file: data after the JSON object")
	}
	seen := make(map[string]bool)
	for i, e := range f.Tokens {
		where := fmt.Sprintf("tokens[%d]", i)
		if !tenantName.MatchString(e.Tenant) {
			return nil, fmt.Errorf("%s.tenant must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit", where)
		}
		if err := checkEntryKey(e, where, seen); err != nil {
			return nil, err
		}
		if len(e.Prefixes) == 0 {
			return nil, fmt.Errorf(`%s.prefixes must list at least one name prefix ("" for every name)`, where)
		}
		for j, p := range e.Prefixes {
			if len(p) > 256 {
				return nil, fmt.Errorf("%s.prefixes[%d] is longer than a lock name", where, j)
			}
		}
		switch e.Access {
		case "read-only", "read-write":
		default:
			return nil, fmt.Errorf("%s.access must be read-only or read-write", where)
		}
		if e.MaxHolds < 0 {
			return nil, fmt.Errorf("%s.maxHolds must not be negative", where)
		}
		if e.AcquiresPerSecond < 0 || math.IsNaN(e.AcquiresPerSecond) || math.IsInf(e.AcquiresPerSecond, 0) {
			return nil, fmt.Errorf("%s.acquiresPerSecond must be a non-negative number", where)
		}
	}
	return f.Tokens, nil
}

// HashToken returns the hex SHA-256 of a token, as an auth file lists it.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// principal is what an authenticated request may do.
type principal struct {
	hash     [sha256.Size]byte // of the token; zero for a certificate
	identity string            // of the certificate; "" for a token
	tenant   string
	prefixes []string
	readOnly bool
	lim      *tokenLimits
	stats    *tenantStats
}

// credential names what p authenticated with in its refusals: "the token",
// or a client certificate by its identity, so that a certificate's user is
// not told about tokens.
func (p *principal) credential() string {
	if p.identity != "" {
		return fmt.Sprintf("the client certificate %q", p.identity)
	}
	return "the token"
}

// allows reports whether p may touch the lock name. A nil principal (no
// auth file) may touch every name.
func (p *principal) allows(name string) bool {
	if p == nil {
		return true
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(name, pre) {
			return true
		}
	}
	return false
}

type principalKey struct{}

// principalFrom returns the request's principal, nil without an auth file.
func principalFrom(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

// tokenLimits is the state of one token's limits: it survives a reload
// that keeps the token.
type tokenLimits struct {
	mu       sync.Mutex
	maxHolds int
	rate     float64 // acquires per second; 0 is no limit
	bucket   float64
	last     time.Time
	pending  int    // holds being acquired
	leases   []hold // holds granted through /v1 (pruned when ended)
	running  int    // running demo operations
}

// hold is a grant counted against maxHolds: n locks until done closes.
type hold struct {
	done <-chan struct{}
	n    int
}

func (h hold) ended() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// take spends one acquire from the token bucket, or returns how long until
// one is available.
func (l *tokenLimits) take(now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rate <= 0 {
		return 0, true
	}
	burst := math.Max(1, l.rate)
	if l.last.IsZero() {
		l.bucket = burst
	} else {
		l.bucket = math.Min(burst, l.bucket+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.bucket >= 1 {
		l.bucket--
		return 0, true
	}
	return time.Duration((1 - l.bucket) / l.rate * float64(time.Second)), false
}

// holdsLocked counts the token's holds; caller holds l.mu.
func (l *tokenLimits) holdsLocked() int {
	l.leases = slices.DeleteFunc(l.leases, hold.ended)
	n := l.pending + l.running
	for _, h := range l.leases {
		n += h.n
	}
	return n
}

func (l *tokenLimits) holds() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holdsLocked()
}

// reserve books n holds, or reports false when they would pass the limit.
func (l *tokenLimits) reserve(n int, demo bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maxHolds > 0 && l.holdsLocked()+n > l.maxHolds {
		return false
	}
	if demo {
		l.running += n
	} else {
		l.pending += n
	}
	return true
}

// tenantStats are one tenant's counters.
type tenantStats struct {
	requests *prometheus.CounterVec // by code
	denied   *prometheus.CounterVec // by reason
}

// authState is the loaded auth file.
type authState struct {
	byHash     map[[sha256.Size]byte]*principal
	byIdentity map[string]*principal // client certificates (identity.go)
	tenants    map[string]bool
}

// tenantMetrics exports the per-tenant series; the tenant label values
// come from the auth file only.
type tenantMetrics struct {
	requests *prometheus.CounterVec
	denied   *prometheus.CounterVec
	holds    *prometheus.Desc

	mu    sync.Mutex
	state *authState // for holds at scrape time
}

var denyReasons = []string{"out_of_scope", "read_only", "rate_limit", "holds_limit"}

func newTenantMetrics() *tenantMetrics {
	return &tenantMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlock_tenant_requests_total",
			Help: "Authenticated /api and /v1 requests by tenant (from the auth file) and status code.",
		}, []string{"tenant", "code"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlock_tenant_denied_total",
			Help: "Requests refused by a tenant's scope (403) or limits (429), by reason.",
		}, []string{"tenant", "reason"}),
		holds: prometheus.NewDesc("dlock_tenant_holds",
			"Holds of each tenant counted by this server (/v1 leases, leaderships and multi-lock names granted here, acquires in progress and running demo operations).",
			[]string{"tenant"}, nil),
	}
}

func (m *tenantMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.denied.Describe(ch)
	ch <- m.holds
}

func (m *tenantMetrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.denied.Collect(ch)
	m.mu.Lock()
	st := m.state
	m.mu.Unlock()
	if st == nil {
		return
	}
	holds := make(map[string]int)
	st.principals(func(p *principal) { holds[p.tenant] += p.lim.holds() })
	for tenant, n := range holds {
		ch <- prometheus.MustNewConstMetric(m.holds, prometheus.GaugeValue, float64(n), tenant)
	}
}

// loadAuth reads Config.AuthFile and makes it the server's auth state,
// keeping the limit state of tokens that stay. Series of tenants no longer
// in the file are dropped.
func (s *Server) loadAuth() error {
	data, err := os.ReadFile(s.cfg.AuthFile)
	if err != nil {
		return fmt.Errorf("dlock: auth file: %w", err)
	}
	entries, err := parseAuthFile(data)
	if err != nil {
		return fmt.Errorf("dlock: auth file %s: %v", s.cfg.AuthFile, err)
	}
	s.authMu.Lock()
	defer s.authMu.Unlock()
	old := s.auth.Load()
	tenants := make(map[string]bool)
	st := &authState{byHash: make(map[[sha256.Size]byte]*principal, len(entries)),
		byIdentity: make(map[string]*principal), tenants: tenants}
	for _, e := range entries {
		var lim *tokenLimits
		if prev := old.lookup(e); prev != nil {
			lim = prev.lim
		} else {
			lim = &tokenLimits{}
		}
		lim.mu.Lock()
		lim.maxHolds, lim.rate = e.MaxHolds, e.AcquiresPerSecond
		lim.mu.Unlock()
		st.add(e, &principal{tenant: e.Tenant, prefixes: slices.Clone(e.Prefixes),
			readOnly: e.Access == "read-only", lim: lim})
		tenants[e.Tenant] = true
	}
	tm := s.tenantMetrics
	st.principals(func(p *principal) {
		p.stats = &tenantStats{
			requests: tm.requests.MustCurryWith(prometheus.Labels{"tenant": p.tenant}),
			denied:   tm.denied.MustCurryWith(prometheus.Labels{"tenant": p.tenant}),
		}
	})
	for t := range tenants {
		for _, reason := range denyReasons {
			tm.denied.WithLabelValues(t, reason) // series exist from the start at 0
		}
	}
	if old != nil {
		old.principals(func(p *principal) {
			if !tenants[p.tenant] {
				tm.requests.DeletePartialMatch(prometheus.Labels{"tenant": p.tenant})
				tm.denied.DeletePartialMatch(prometheus.Labels{"tenant": p.tenant})
			}
		})
	}
	tm.mu.Lock()
	tm.state = st
	tm.mu.Unlock()
	s.auth.Store(st)
	return nil
}

// ReloadAuth reads Config.AuthFile again: tokens added work at once,
// tokens removed get 401 from their next request; open connections and
// leases are kept. On an error the previous file stays in force. Without
// an auth file it does nothing.
func (s *Server) ReloadAuth() error {
	if s.cfg.AuthFile == "" {
		return nil
	}
	if err := s.loadAuth(); err != nil {
		return err
	}
	s.log.Info("dlock: auth file reloaded", "tenants", s.tenantCount())
	return nil
}

func (s *Server) tenantCount() int {
	st := s.auth.Load()
	if st == nil {
		return 0
	}
	seen := make(map[string]bool)
	st.principals(func(p *principal) { seen[p.tenant] = true })
	return len(seen)
}

// authenticate checks the bearer token of an /api or /v1 request. With an
// auth file it returns the request with its principal; with a single
// token (Config.AuthToken) the request as it is. On failure it writes the
// 401 and returns false.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if s.cfg.AuthFile == "" {
		if s.authorized(r) {
			return r, true
		}
		unauthorized(w)
		return r, false
	}
	p, e := s.principalOf(r) // identity.go: token, client certificate or both
	if e != nil {
		if e.Status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dlock"`)
		}
		writeAPIError(w, e)
		return r, false
	}
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p)), true
}

// revoked reports whether p's token left the auth file in a reload since
// p was looked up. A nil principal is never revoked.
func (s *Server) revoked(p *principal) bool {
	return p != nil && !s.auth.Load().has(p)
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="dlock"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
}

// bearer returns the token of an "Authorization: Bearer TOKEN" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
}

// routeScope says what a route needs of a scoped token.
type routeScope struct {
	param   string // path parameter holding the lock name; "" for none
	names   bool   // the JSON body's "names" are the lock names (multi-locks)
	write   bool   // refused to read-only tokens
	acquire bool   // counts against acquiresPerSecond
	demo    bool   // a demo operation: a hold for as long as the request runs
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
		p := principalFrom(r.Context())
		if p == nil {
			h.ServeHTTP(w, r)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			// A request that outlived its tenant (removed by a reload) is
			// not counted: it would bring the tenant's series back.
			if s.auth.Load().tenants[p.tenant] {
				p.stats.requests.WithLabelValues(strconv.Itoa(sw.status())).Inc()
			}
		}()
		deny := func(reason string, e *apiError) {
			p.stats.denied.WithLabelValues(reason).Inc()
			writeAPIError(sw, e)
		}
		name := ""
		if scope.param != "" {
			name = r.PathValue(scope.param)
		}
		switch {
		case !listed:
			deny("out_of_scope", &apiError{Status: http.StatusForbidden, Error: "forbidden",
				Message: fmt.Sprintf("tenant %q: this endpoint is not open to scoped credentials (%s)", p.tenant, p.credential())})
			return
		case scope.write && p.readOnly:
			deny("read_only", &apiError{Status: http.StatusForbidden, Error: "read only",
				Message: fmt.Sprintf("tenant %q: %s is read-only", p.tenant, p.credential())})
			return
		case scope.param != "" && !p.allows(name):
			deny("out_of_scope", &apiError{Status: http.StatusForbidden, Error: "out of scope", Field: scope.param,
				Message: fmt.Sprintf("tenant %q: lock %q is outside the name prefixes of %s", p.tenant, name, p.credential())})
			return
		}
		if scope.names {
			names, e := bodyNames(r)
			if e != nil {
				// Fail closed: a body whose names cannot be read passes
				// no scope check; it gets the answer its handler would
				// give it (400 naming the problem, or 413).
				writeAPIError(sw, e)
				return
			}
			for _, n := range names {
				if !p.allows(n) {
					deny("out_of_scope", &apiError{Status: http.StatusForbidden, Error: "out of scope", Field: "names", Name: n,
						Message: fmt.Sprintf("tenant %q: lock %q is outside the name prefixes of %s", p.tenant, n, p.credential())})
					return
				}
			}
		}
		if scope.acquire {
			if wait, ok := p.lim.take(time.Now()); !ok {
				ms := durationMs(wait)
				deny("rate_limit", &apiError{Status: http.StatusTooManyRequests, Error: "rate limited", RetryAfterMs: &ms,
					Message: fmt.Sprintf("tenant %q: over the %g acquires per second of %s", p.tenant, p.lim.rate, p.credential())})
				return
			}
		}
		if scope.demo {
			if !p.lim.reserve(1, true) {
				deny("holds_limit", holdsLimitError(p, 1))
				return
			}
			defer func() {
				p.lim.mu.Lock()
				p.lim.running--
				p.lim.mu.Unlock()
			}()
		}
		h.ServeHTTP(sw, r)
	})
}

func holdsLimitError(p *principal, n int) *apiError {
	one := int64(1000)
	msg := fmt.Sprintf("tenant %q: %s already holds its limit of %d locks", p.tenant, p.credential(), p.lim.maxHolds)
	if n > 1 {
		msg = fmt.Sprintf("tenant %q: %d more locks would pass the limit of %d of %s", p.tenant, n, p.lim.maxHolds, p.credential())
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
	p := principalFrom(ctx)
	if p == nil {
		return func(<-chan struct{}) {}, nil
	}
	if !p.lim.reserve(n, false) {
		p.stats.denied.WithLabelValues("holds_limit").Inc()
		return nil, holdsLimitError(p, n)
	}
	return func(done <-chan struct{}) {
		p.lim.mu.Lock()
		defer p.lim.mu.Unlock()
		p.lim.pending -= n
		if done != nil {
			p.lim.leases = append(p.lim.leases, hold{done: done, n: n})
		}
	}, nil
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
