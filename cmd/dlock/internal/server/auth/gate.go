// Package auth says who a request of the lock service is: the one bearer
// token of --auth-token, or an auth file's entries (tokens by their
// SHA-256, client certificates by their identity, each with a tenant, name
// prefixes, access and limits), and holds the listener's TLS material. The
// server asks it through a small interface; what each route requires of a
// principal (scopes.go in package server) is the server's.
package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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
	Access   string   `json:"access"` // read-only, read-write or admin
	// Name names the credential in the holds it takes: a hold acquired
	// without an owner records "<tenant>/<name>". Optional; a client
	// certificate's identity by default.
	Name string `json:"name"`
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
		case "read-only", "read-write", "admin":
		default:
			return nil, fmt.Errorf("%s.access must be read-only, read-write or admin", where)
		}
		if len(e.Name) > 128 || strings.ContainsFunc(e.Name, func(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }) {
			return nil, fmt.Errorf("%s.name must be at most 128 bytes of text without control characters", where)
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

// Principal is what an authenticated request may do: the entry of the
// auth file its credential matched.
type Principal struct {
	hash     [sha256.Size]byte // of the token; zero for a certificate
	identity string            // of the certificate; "" for a token
	tenant   string
	name     string // the entry's name, or the certificate's identity
	prefixes []string
	readOnly bool
	admin    bool
	lim      *tokenLimits
	stats    *tenantStats
}

// Credential names what p authenticated with in its refusals: "the token",
// or a client certificate by its identity, so that a certificate's user is
// not told about tokens.
func (p *Principal) Credential() string {
	if p.identity != "" {
		return fmt.Sprintf("the client certificate %q", p.identity)
	}
	return "the token"
}

// Allows reports whether p may touch the lock name. A nil principal (no
// auth file) may touch every name.
func (p *Principal) Allows(name string) bool {
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

// NewContext returns ctx carrying p, the principal of its request.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal of a request's ctx, nil without an
// auth file.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
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
	byHash     map[[sha256.Size]byte]*Principal
	byIdentity map[string]*Principal // client certificates (identity.go)
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

var denyReasons = []string{"out_of_scope", "read_only", "not_admin", "rate_limit", "holds_limit"}

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
	st.principals(func(p *Principal) { holds[p.tenant] += p.lim.holds() })
	for tenant, n := range holds {
		ch <- prometheus.MustNewConstMetric(m.holds, prometheus.GaugeValue, float64(n), tenant)
	}
}

// Gate says who a request is: the one bearer token of Config.AuthToken, or
// the entries of an auth file (tokens by their SHA-256, client certificates
// by their identity), which it reads again on Reload. It is safe for
// concurrent use.
type Gate struct {
	file     string
	tokenSum [sha256.Size]byte // of the single token
	hasToken bool
	state    atomic.Pointer[authState] // the auth file's entries
	mu       sync.Mutex                // serialises loads of the auth file
	metrics  *tenantMetrics
}

// New returns the gate of a single bearer token (token), or of the auth
// file at path file, which it reads; with neither, every request passes.
// The two cannot be combined.
func New(token, file string) (*Gate, error) {
	if token != "" && file != "" {
		return nil, errors.New("dlock: server: an auth token and an auth file cannot be combined; list the token in the file")
	}
	g := &Gate{file: file, metrics: newTenantMetrics()}
	if token != "" {
		g.tokenSum, g.hasToken = sha256.Sum256([]byte(token)), true
	}
	if file != "" {
		if err := g.load(); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Refusal is why a request's credentials were refused: an HTTP status
// (401, or 403 for a token and a certificate of different tenants), a
// short code and a message naming the credential.
type Refusal struct {
	Status  int
	Code    string
	Message string
}

func unauthorized(msg string) *Refusal {
	return &Refusal{Status: http.StatusUnauthorized, Code: "unauthorized", Message: msg}
}

// Principal authenticates r. With an auth file it returns the entry r's
// credentials match (see principalOf); with a single token nil, once r
// carries it; with neither nil. Otherwise it returns the refusal.
func (g *Gate) Principal(r *http.Request) (*Principal, *Refusal) {
	if g.file != "" {
		return g.principalOf(r)
	}
	if g.hasToken && !g.authorized(r) {
		return nil, unauthorized("missing or wrong bearer token")
	}
	return nil, nil
}

// authorized reports whether r carries the single token. The comparison
// is of SHA-256 sums, in constant time, so neither the token's content nor
// its length leaks through timing.
func (g *Gate) authorized(r *http.Request) bool {
	tok, ok := bearer(r)
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], g.tokenSum[:]) == 1
}

// Revoked reports whether p's entry left the auth file in a reload since
// p was looked up. A nil principal is never revoked.
func (g *Gate) Revoked(p *Principal) bool {
	return p != nil && !g.state.Load().has(p)
}

// CountRequest counts a request of p answered with code in its tenant's
// series, unless the tenant left the auth file since (a request that
// outlived its tenant would bring its series back).
func (g *Gate) CountRequest(p *Principal, code int) {
	if g.state.Load().tenants[p.tenant] {
		p.stats.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	}
}

// Reload reads the auth file again: entries added work at once, entries
// removed are refused from their next request; the limits' state of the
// entries kept is kept. On an error the previous file stays in force.
// Without an auth file it does nothing. It returns the number of tenants.
func (g *Gate) Reload() (int, error) {
	if g.file == "" {
		return 0, nil
	}
	if err := g.load(); err != nil {
		return 0, err
	}
	seen := make(map[string]bool)
	g.state.Load().principals(func(p *Principal) { seen[p.tenant] = true })
	return len(seen), nil
}

// Collector exports the per-tenant series: requests by code, refusals by
// reason, and holds.
func (g *Gate) Collector() prometheus.Collector { return g.metrics }

// load reads the auth file and makes it the gate's state,
// keeping the limit state of tokens that stay. Series of tenants no longer
// in the file are dropped.
func (g *Gate) load() error {
	data, err := os.ReadFile(g.file)
	if err != nil {
		return fmt.Errorf("dlock: auth file: %w", err)
	}
	entries, err := parseAuthFile(data)
	if err != nil {
		return fmt.Errorf("dlock: auth file %s: %v", g.file, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.state.Load()
	tenants := make(map[string]bool)
	st := &authState{byHash: make(map[[sha256.Size]byte]*Principal, len(entries)),
		byIdentity: make(map[string]*Principal), tenants: tenants}
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
		name := e.Name
		if name == "" {
			name = e.Identity
		}
		st.add(e, &Principal{tenant: e.Tenant, name: name, prefixes: slices.Clone(e.Prefixes),
			readOnly: e.Access == "read-only", admin: e.Access == "admin", lim: lim})
		tenants[e.Tenant] = true
	}
	tm := g.metrics
	st.principals(func(p *Principal) {
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
		old.principals(func(p *Principal) {
			if !tenants[p.tenant] {
				tm.requests.DeletePartialMatch(prometheus.Labels{"tenant": p.tenant})
				tm.denied.DeletePartialMatch(prometheus.Labels{"tenant": p.tenant})
			}
		})
	}
	tm.mu.Lock()
	tm.state = st
	tm.mu.Unlock()
	g.state.Store(st)
	return nil
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

// Tenant is p's tenant.
func (p *Principal) Tenant() string { return p.tenant }

// ReadOnly reports whether p may only read.
func (p *Principal) ReadOnly() bool { return p.readOnly }

// Admin reports whether p has admin access: read-write, and the
// operator's requests (force-release).
func (p *Principal) Admin() bool { return p.admin }

// Holder is how a hold taken by p names its owner when the request names
// none: "<tenant>/<name>" (the entry's name, or the client certificate's
// identity), or "<tenant>/" + fallback when the entry has neither.
func (p *Principal) Holder(fallback string) string {
	if p.name != "" {
		return p.tenant + "/" + p.name
	}
	return p.tenant + "/" + fallback
}

// Take spends one of p's acquires per second, or returns how long until
// one is available.
func (p *Principal) Take(now time.Time) (time.Duration, bool) { return p.lim.take(now) }

// Rate is p's acquires per second; 0 is no limit.
func (p *Principal) Rate() float64 {
	p.lim.mu.Lock()
	defer p.lim.mu.Unlock()
	return p.lim.rate
}

// MaxHolds is p's limit of concurrent holds; 0 is no limit.
func (p *Principal) MaxHolds() int {
	p.lim.mu.Lock()
	defer p.lim.mu.Unlock()
	return p.lim.maxHolds
}

// Reserve books n holds for p, or reports false when they would pass its
// limit: a running demo operation (demo, until EndDemo), or holds being
// acquired (until Claim).
func (p *Principal) Reserve(n int, demo bool) bool { return p.lim.reserve(n, demo) }

// EndDemo ends a demo operation Reserve booked.
func (p *Principal) EndDemo() {
	p.lim.mu.Lock()
	p.lim.running--
	p.lim.mu.Unlock()
}

// Claim settles n holds Reserve booked for an acquire: granted, they count
// until done closes; with done nil (the acquire failed) they end now.
func (p *Principal) Claim(n int, done <-chan struct{}) {
	p.lim.mu.Lock()
	defer p.lim.mu.Unlock()
	p.lim.pending -= n
	if done != nil {
		p.lim.leases = append(p.lim.leases, hold{done: done, n: n})
	}
}

// Deny counts a refusal of p's request in its tenant's series, by reason:
// "out_of_scope", "read_only", "not_admin", "rate_limit" or "holds_limit".
func (p *Principal) Deny(reason string) { p.stats.denied.WithLabelValues(reason).Inc() }
