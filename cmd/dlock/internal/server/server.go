// Package server is the HTTP face of a [dlock.Locker]: the seed-compatible
// demo endpoints (/api/locks/{pattern}/{resourceId}), the /v1 lease API for
// clients in any language, /health, /metrics, the server-sent event stream
// /v1/events and the dashboard at /. It works on any store through the
// Locker and never names a concrete one. docs/http.md is the reference of
// every endpoint.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server/auth"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server/replicas"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
)

// DefaultAddr is the address the service listens on when Config.Addr is
// empty: port 3009, as in the seed documents.
const DefaultAddr = ":3009"

// Limits of the HTTP API (DESIGN §6).
const (
	MaxBodyBytes = 64 << 10 // larger bodies get 413
	MinTTLMs     = 100
	MaxTTLMs     = 86_400_000
	MaxWaitMs    = 300_000
	MaxDemoMs    = 300_000
	DefaultTTLMs = 30_000
	// MaxLockDelayMs bounds lockDelayMs (dlock.MaxLockDelay).
	MaxLockDelayMs = 3_600_000
)

// Config configures a Server. The zero value serves on :3009 without auth.
type Config struct {
	// Addr is the listen address of ListenAndServe. Default ":3009".
	Addr string
	// AuthToken, when set, is the bearer token every /api and /v1 request
	// must carry ("Authorization: Bearer TOKEN"). It is compared in
	// constant time and never logged.
	AuthToken string
	// AuthFile, when set, is the path of an auth file of scoped tokens
	// (docs/operations.md): every /api and /v1 request must carry one of
	// its tokens, and may touch only the names in the token's scope.
	// Server.ReloadAuth reads it again. It cannot be combined with
	// AuthToken.
	AuthFile string
	// Logger receives one line per request at Debug, start and stop at
	// Info, and failures at Warn. Default: discard.
	Logger *slog.Logger
	// Metrics must be the Metrics whose Observe the Locker was created
	// with (dlock.WithObserver(m.Observe)): the server exports it at
	// /metrics and streams its events to the dashboard. When nil the
	// server makes its own, which sees no lock events.
	Metrics *dlockprom.Metrics
	// StoreName describes the store in /health and on the dashboard, for
	// example "memory", "valkey" or "redlock(5)".
	StoreName string
	// Version is reported by /health.
	Version string
	// ShutdownTimeout bounds graceful shutdown: how long in-flight
	// requests (demo operations included) may run on after the server
	// stops accepting. Default 25s.
	ShutdownTimeout time.Duration
	// SnapshotInterval is how often /v1/events sends the list of locks.
	// Default 1s.
	SnapshotInterval time.Duration
	// MaxEventStreams bounds the concurrent /v1/events streams (each one
	// lists the store's locks every SnapshotInterval); more get 503.
	// Default 64.
	MaxEventStreams int
	// TracerProvider, when set, traces the /api and /v1 requests: each is
	// a server span that continues the caller's W3C traceparent header,
	// and the lock calls it makes are spans under it when the Lockers
	// observe with Observer. Default: no tracing.
	TracerProvider trace.TracerProvider
	// Observer, when set, also gets the events of the server's own Locker
	// (the /v1 leases), besides Metrics; the caller's Locker should have
	// been created with it as well (dlockotel's Observe, say).
	Observer func(dlock.Event)
	// TLSCert and TLSKey, when set, are PEM files of the listener's
	// certificate chain and key: Serve speaks HTTPS (TLS 1.2 at least,
	// HTTP/2 offered). ReloadTLS reads them again (package auth).
	TLSCert, TLSKey string
	// ClientCA, when set (with TLSCert), is a PEM file of the CAs whose
	// client certificates are required and verified in every handshake
	// (mutual TLS); the auth file may map their identities to tenants.
	ClientCA string
}

// Server serves the HTTP API of one Locker. Create it with New.
type Server struct {
	locker *dlock.Locker // the caller's: demo operations
	v1     *dlock.Locker // the server's own, of dlock.WithOwnerReleaseOnly: /v1 leases
	cfg    Config
	log    *slog.Logger
	mux    *routeMux
	obs    instruments

	gate credentials
	tls  *auth.TLS // nil without TLS

	leases  leaseTable
	multi   multiTable // /v1/multi (multi.go)
	streams streams    // /v1/events and observe streams (stream.go)
	demo    demoSet
	history *history
	rep     *replicas.Bus
	life    lifecycle
}

// credentials is what the server asks of package auth: who a request is
// (nil without an auth file), whether that still holds after a reload,
// the tenant's request count, and the reload itself.
type credentials interface {
	Principal(r *http.Request) (*auth.Principal, *auth.Refusal)
	Revoked(p *auth.Principal) bool
	CountRequest(p *auth.Principal, code int)
	Reload() (tenants int, err error)
}

// instruments are the server's own metrics and tracer.
type instruments struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	tracer   trace.Tracer // nil: no request spans
}

func newInstruments() instruments {
	return instruments{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlock_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dlock_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern (demo operations and waits included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"route"}),
	}
}

// lifecycle is the state of the server's start and shutdown.
type lifecycle struct {
	started   time.Time
	unsub     func() // of the Metrics' events
	inflight  sync.WaitGroup
	closeOnce sync.Once
	drain     chan struct{} // closed when shutdown starts: waits and event streams end
	// drainCtx is done with drain: a cancelCtx, with which waitContext's
	// AfterFunc registers instead of starting a goroutine per request.
	drainCtx  context.Context
	endDrain  context.CancelFunc
	halt      chan struct{} // closed when the shutdown timeout passed: demo operations end
	stopOnce  sync.Once
	serveOnce sync.Once
}

// New returns a Server for locker. The Locker must have been created with
// the observer of cfg.Metrics (see [Config]); the server does not close it.
// The server grants /v1 leases from a Locker of its own on the same store,
// which never releases a lease on its own: /v1 leases belong to their
// clients. Serve stops it when it returns; a Server used only through
// Handler must be closed with Close.
func New(locker *dlock.Locker, cfg Config) (*Server, error) {
	if locker == nil {
		return nil, errors.New("dlock: server: nil locker")
	}
	cfg.setDefaults()
	log, m := cfg.Logger, cfg.Metrics
	s := &Server{
		locker:  locker,
		cfg:     cfg,
		log:     log,
		mux:     newRouteMux(),
		obs:     newInstruments(),
		history: newHistory(historySeconds),
		life:    lifecycle{started: time.Now(), drain: make(chan struct{}), halt: make(chan struct{})},
	}
	s.life.drainCtx, s.life.endDrain = context.WithCancel(context.Background())
	gate, err := auth.New(cfg.AuthToken, cfg.AuthFile)
	if err != nil {
		return nil, err
	}
	s.gate = gate
	if s.tls, err = auth.NewTLS(cfg.TLSCert, cfg.TLSKey, cfg.ClientCA); err != nil {
		return nil, err
	}
	if cfg.TracerProvider != nil {
		s.obs.tracer = cfg.TracerProvider.Tracer(tracerScope)
	}
	v1, err := newV1Locker(locker, cfg)
	if err != nil {
		return nil, err
	}
	s.v1 = v1
	for _, c := range []prometheus.Collector{m, s.obs.requests, s.obs.duration, gate.Collector(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := s.obs.reg.Register(c); err != nil {
			v1.Close()
			return nil, fmt.Errorf("dlock: server: register metrics: %w", err)
		}
	}
	s.rep = replicas.Start(locker.Store(), log, replicas.Hooks{Event: s.remoteEvent, Served: s.detach,
		Held: func(name, token string) bool { return s.leases.lookup(leaseKey{name, token}) != nil }})
	s.life.unsub = m.Subscribe(s.localEvent)
	s.mux.wrap = s.guard
	s.routes()
	return s, nil
}

// setDefaults fills in the defaults of the fields left zero.
func (cfg *Config) setDefaults() {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 25 * time.Second
	}
	if cfg.SnapshotInterval <= 0 {
		cfg.SnapshotInterval = time.Second
	}
	if cfg.MaxEventStreams <= 0 {
		cfg.MaxEventStreams = 64
	}
	if cfg.StoreName == "" {
		cfg.StoreName = "unknown"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = dlockprom.New()
	}
}

// newV1Locker returns the Locker of the /v1 leases, on locker's store:
// they belong to their clients, so it never releases one on its own
// ([dlock.WithOwnerReleaseOnly]). Its events go to cfg.Metrics and
// cfg.Observer.
func newV1Locker(locker *dlock.Locker, cfg Config) (*dlock.Locker, error) {
	m := cfg.Metrics
	observe := m.Observe
	if extra := cfg.Observer; extra != nil {
		observe = func(ev dlock.Event) {
			m.Observe(ev)
			extra(ev)
		}
	}
	v1, err := dlock.New(locker.Store(), dlock.WithOwnerReleaseOnly(), dlock.WithDriftFactor(leaseDriftFactor),
		dlock.WithObserver(observe), dlock.WithLogger(cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("dlock: server: %w", err)
	}
	return v1, nil
}

func (s *Server) routes() {
	s.mux.HandleFunc("POST /api/locks/{pattern}/{resourceId}", s.handleDemo)
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.HandleFunc("GET /openapi.json", s.handleOpenAPI)
	s.mux.HandleFunc("POST /v1/locks/{name}/acquire", s.handleAcquire)
	s.mux.HandleFunc("POST /v1/locks/{name}/extend", s.handleExtend)
	s.mux.HandleFunc("POST /v1/locks/{name}/release", s.handleRelease)
	s.mux.HandleFunc("POST /v1/locks/{name}/force-release", s.handleForceRelease) // forced.go
	s.mux.HandleFunc("GET /v1/locks/{name}", s.handleState)
	s.mux.HandleFunc("GET /v1/locks", s.handleList)
	s.mux.HandleFunc("GET /v1/events", s.handleEvents)
	s.mux.HandleFunc("POST /v1/elections/{name}/campaign", s.handleCampaign) // elections.go
	s.mux.HandleFunc("POST /v1/elections/{name}/resign", s.handleResign)
	s.mux.HandleFunc("POST /v1/elections/{name}/extend", s.handleElectionExtend)
	s.mux.HandleFunc("GET /v1/elections/{name}", s.handleLeader)
	s.mux.HandleFunc("GET /v1/elections/{name}/observe", s.handleObserve)
	s.mux.HandleFunc("POST /v1/multi/acquire", s.handleMultiAcquire) // multi.go
	s.mux.HandleFunc("POST /v1/multi/extend", s.handleMultiExtend)
	s.mux.HandleFunc("POST /v1/multi/release", s.handleMultiRelease)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.obs.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.log}}))
	s.mux.HandleFunc("GET /{$}", s.handleDashboard)
	s.mux.HandleFunc("GET /static/{file...}", s.handleStatic)
}

// Handler returns the server's HTTP handler, for tests and for mounting
// under another server. Its requests are counted as in-flight for
// graceful shutdown only when served by ListenAndServe or Serve.
func (s *Server) Handler() http.Handler { return s }

// ServeHTTP implements [http.Handler]: authentication, JSON errors for
// unrouted requests, request metrics and logging around the routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.life.inflight.Add(1)
	defer s.life.inflight.Done()
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	_, pattern := s.mux.Handler(r)
	route := pattern
	if route == "" {
		route = "unmatched"
	}
	if s.obs.tracer != nil && traced(r.URL.Path) {
		var span trace.Span
		r, span = s.startSpan(r, route)
		defer func() { endSpan(span, sw.status()) }() // after the recovery below
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("dlock: server: panic", "route", route, "panic", fmt.Sprint(v))
			if !sw.wrote {
				writeError(sw, http.StatusInternalServerError, "internal", "internal error")
			}
		}
		code := sw.status()
		s.obs.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		s.obs.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		lvl := slog.LevelDebug
		if code >= 500 {
			lvl = slog.LevelWarn
		}
		if s.log.Enabled(r.Context(), lvl) {
			s.log.Log(r.Context(), lvl, "http request", "method", r.Method, "route", route, "status", code, "duration", time.Since(start))
		}
	}()

	if needsAuth(r.URL.Path) {
		var ok bool
		if r, ok = s.authenticate(sw, r); !ok {
			return
		}
	}
	if pattern == "" {
		s.unrouted(sw, r)
		return
	}
	r.Body = http.MaxBytesReader(sw, r.Body, MaxBodyBytes)
	s.mux.ServeHTTP(sw, r)
}

func needsAuth(path string) bool {
	return path == "/v1" || path == "/api" || strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, "/api/")
}

// unrouted answers a request no route matched, in JSON: 405 with Allow
// when the path exists for other methods, a redirect to the clean path,
// else 404.
func (s *Server) unrouted(w http.ResponseWriter, r *http.Request) {
	h, _ := s.mux.Handler(r)
	rec := &recorder{header: make(http.Header)}
	h.ServeHTTP(rec, r)
	switch rec.code {
	case http.StatusMethodNotAllowed:
		allow := rec.header.Get("Allow")
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method not allowed",
			fmt.Sprintf("%s is not allowed here; allowed: %s", r.Method, allow))
	case http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		w.Header().Set("Location", rec.header.Get("Location"))
		writeError(w, rec.code, "redirect", "the canonical path is "+rec.header.Get("Location"))
	default:
		writeError(w, http.StatusNotFound, "not found", "no such endpoint; see docs/http.md")
	}
}

// ListenAndServe listens on Config.Addr and serves until ctx ends, then
// shuts down gracefully (see [Server.Serve]). Like Serve, it closes the
// server when it returns, also when it cannot listen.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		s.Close()
		return fmt.Errorf("dlock: server: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully: it stops
// accepting connections, ends event streams and requests still waiting for
// a lock (they get 503 "shutting down"), lets the other in-flight requests
// finish (demo operations included) for up to Config.ShutdownTimeout, then
// cuts the rest short, waits for every handler to return and releases the
// leases of demo operations that are left. /v1 leases stay on the store:
// their clients keep renewing them, possibly through another instance.
// Serve returns nil after a shutdown caused by ctx, or the error that
// stopped the listener. A Server serves once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	first := false
	s.life.serveOnce.Do(func() { first = true })
	if !first {
		ln.Close()
		return errors.New("dlock: server: Serve called twice")
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second, // extended per request by waits, demo operations and streams
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slogLogger(s.log),
	}
	srv.RegisterOnShutdown(s.beginDrain)
	errc := make(chan error, 1)
	if s.tls != nil {
		srv.TLSConfig = s.tls.ServerConfig()
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	s.log.Info("dlock: serving", "addr", ln.Addr().String(), "store", s.cfg.StoreName, "auth", s.cfg.AuthToken != "" || s.cfg.AuthFile != "",
		"tls", s.tls != nil, "clientCA", s.cfg.ClientCA != "")
	s.warnPlaintext(ln.Addr())

	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
		s.log.Info("dlock: shutting down", "timeout", s.cfg.ShutdownTimeout)
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		if err := srv.Shutdown(sctx); err != nil {
			s.log.Warn("dlock: shutdown timed out; cutting in-flight requests short", "err", err)
			close(s.life.halt)
			srv.Close()
		}
		cancel()
		<-errc //nolint:errcheck // Serve's answer to Shutdown: ErrServerClosed
	}
	s.beginDrain()
	s.life.inflight.Wait()
	s.releaseDemo()
	s.Close()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("dlock: server: %w", serveErr)
	}
	s.log.Info("dlock: stopped")
	return nil
}

// Close stops the server's own Locker (leaving /v1 leases on the store to
// their clients) and its event subscription. Serve calls it when it
// returns; call it after using Handler alone. Requests served after Close
// cannot take /v1 leases.
func (s *Server) Close() error {
	s.life.closeOnce.Do(func() {
		s.life.unsub()
		s.rep.Stop()
		s.v1.Close()
	})
	return nil
}

func (s *Server) beginDrain() {
	s.life.stopOnce.Do(func() {
		close(s.life.drain)
		s.life.endDrain()
	})
}

// statusWriter records the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.code, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) status() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.code
}

// Unwrap lets http.ResponseController reach the connection's deadlines
// and flusher.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recorder captures what the mux's own 404/405/redirect handlers would
// write, so that it can be answered in JSON instead.
type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return len(b), nil
}
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
