package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

var serveCmd = &command{
	name:     "serve",
	synopsis: "[flags]",
	summary:  "run the HTTP lock service, metrics and dashboard (default :3009)",
	help: `
Run the HTTP lock service: the /v1 lease API for clients in any language, the
seed-compatible demo endpoints under /api/locks, /health, /metrics
(Prometheus), /v1/events and the live dashboard at /. See docs/http.md.

The store is chosen by flags: --redis-url for one Valkey/Redis node or
cluster, --redlock-urls for a Redlock quorum over independent nodes,
--etcd-endpoints for etcd, --postgres-url for PostgreSQL, --zookeeper-servers
for ZooKeeper; with none, locks live in this process's memory (fine for a
try-out or a single instance, shared by nobody else). SIGTERM or SIGINT stops accepting
connections, lets requests in flight finish, and releases the leases the
service holds.

With --otlp-endpoint, the service exports its trace spans over OTLP/HTTP:
one per /api and /v1 request, continuing the caller's W3C traceparent
header, with the lock's spans (dlock.acquire, dlock.hold, dlock.extend,
dlock.release) under it. See docs/metrics.md.

With --auth-file, every /api and /v1 request needs one of the file's tokens,
which may touch only the lock names in its scope; SIGHUP rereads the file
without dropping connections (a broken file is refused and the one in force
kept). 'dlock auth hash' prints the hash of a token for the file.

With --tls-cert and --tls-key it serves HTTPS (TLS 1.2+, HTTP/2); with
--client-ca every client must present a certificate of those CAs, and the
auth file may map a certificate's identity to a tenant. SIGHUP rereads
these files too (a bad or expired certificate is refused and the one in
force kept). Without TLS, on an address beyond loopback and with tokens,
a warning says that tokens travel in clear.

Examples:
  dlock serve
  dlock serve --addr 127.0.0.1:8080 --redis-url redis://127.0.0.1:6379
  DLOCK_AUTH_TOKEN=s3cret dlock serve --redlock-urls redis://a:6379,redis://b:6379,redis://c:6379
  dlock serve --auth-file /etc/dlock/auth.json --redis-url redis://127.0.0.1:6379
  dlock serve --tls-cert tls.pem --tls-key tls-key.pem --client-ca ca.pem --auth-file auth.json
  dlock serve --otlp-endpoint http://127.0.0.1:4318`,
}

type serveFlags struct {
	addr, logLevel, logFormat string
	authFile                  string
	otlpEndpoint              string
	tls                       serveTLSFlags // tlsflags.go
	shutdownTimeout           time.Duration
	maxEventStreams           int
}

func init() {
	serveCmd.flags = func(x *cmd) any {
		f := &serveFlags{}
		x.fs.String(&f.addr, "addr", "ADDR", "DLOCK_ADDR", ":3009", "address to listen on")
		x.store.register(x.fs, false)
		x.fs.String(&x.store.authToken, "auth-token", "TOKEN", "DLOCK_AUTH_TOKEN", "",
			"require 'Authorization: Bearer TOKEN' on /api and /v1 (never logged)")
		x.fs.String(&f.authFile, "auth-file", "PATH", "DLOCK_AUTH_FILE", "",
			"scoped tokens: a JSON file of hashed tokens with name prefixes, access and limits; reread on SIGHUP (docs/operations.md)")
		x.fs.String(&f.otlpEndpoint, "otlp-endpoint", "URL", "DLOCK_OTLP_ENDPOINT", "",
			"export the service's trace spans to this OTLP/HTTP collector (http://HOST:4318; /v1/traces is added to a URL without a path)")
		f.tls.register(x.fs)
		x.fs.Duration(&f.shutdownTimeout, "shutdown-timeout", "DLOCK_SHUTDOWN_TIMEOUT", 25*time.Second,
			"on SIGTERM, how long requests in flight may take to finish")
		x.fs.Int(&f.maxEventStreams, "max-event-streams", "N", "DLOCK_MAX_EVENT_STREAMS", 64,
			"at most N concurrent /v1/events and observe streams; more get 503 (each lists the locks every second)")
		x.fs.String(&f.logLevel, "log-level", "LEVEL", "DLOCK_LOG_LEVEL", "info", "debug, info, warn or error")
		x.fs.String(&f.logFormat, "log-format", "FORMAT", "DLOCK_LOG_FORMAT", "text", "text or json")
		return f
	}
	serveCmd.run = runServe
}

func (f *serveFlags) logger(x *cmd) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, errors.New("--log-level must be debug, info, warn or error")
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(f.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(x.env.Stderr, opts)), nil
	case "json":
		opts.ReplaceAttr = durationString
		return slog.New(slog.NewJSONHandler(x.env.Stderr, opts)), nil
	}
	return nil, errors.New("--log-format must be text or json")
}

func runServe(ctx context.Context, x *cmd, _, _ []string) int {
	f := x.opts.(*serveFlags)
	log, err := f.logger(x)
	if err != nil {
		return x.usageFail("%v", err)
	}
	if _, err := x.store.configured(); err != nil {
		return x.usageFail("%v", err)
	}
	if f.authFile != "" && x.store.authToken != "" {
		return x.usageFail("--auth-token and --auth-file cannot be combined; list the token in the auth file")
	}
	if err := f.tls.check(); err != nil {
		return x.usageFail("%v", err)
	}
	if f.shutdownTimeout <= 0 {
		return x.usageFail("--shutdown-timeout must be positive")
	}
	if err := checkAddr(f.addr); err != nil {
		return x.usageFail("%v", err)
	}
	if f.otlpEndpoint != "" {
		if f.otlpEndpoint, err = otlpTracesURL(f.otlpEndpoint); err != nil {
			return x.usageFail("%v", err)
		}
	}
	if f.maxEventStreams < 1 || f.maxEventStreams > 1_000_000 {
		return x.usageFail("--max-event-streams must be from 1 to 1000000")
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	x.store.replica = true // replicas share leases (zookeeper.WithTakeOver)
	b, err := x.store.open(ctx, log)
	if err != nil {
		return x.fail(wrap("opening the "+storeKind(&x.store)+" store", err))
	}
	if b == nil {
		b = &backend{store: memory.New(memory.WithFenceRetention(x.store.fenceRetention)), name: "memory", desc: "in-process memory", close: func() {}}
		log.Warn("dlock: no store flag (--redis-url, --redlock-urls, --etcd-endpoints, --postgres-url, --zookeeper-servers): using the in-memory store; locks are local to this process and vanish when it exits")
	}
	defer b.close()
	log.Info("dlock: store", "kind", b.name, "at", b.desc)
	if err := serve(ctx, x, f, b, log); err != nil {
		return x.fail(err)
	}
	return 0
}

// durationString writes durations in JSON logs as Go durations ("25s"),
// as the text format does, rather than integer nanoseconds.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// checkAddr refuses an --addr that no listener could take: not HOST:PORT,
// or a port that is neither 0-65535 nor a service name.
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("--addr %q: want HOST:PORT or :PORT with a port from 0 to 65535 (%v)", addr, err)
	}
	return nil
}

// newLocker returns the service's Locker over b.
func newLocker(b *backend, log *slog.Logger, opts ...dlock.Option) (*dlock.Locker, error) {
	return dlock.New(b.store, append([]dlock.Option{dlock.WithLogger(log)}, opts...)...)
}
