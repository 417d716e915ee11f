package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/httpstore"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// storeFlags select the store a command works on.
type storeFlags struct {
	redisURL    string
	redlockURLs string
	etcd        string // comma-separated etcd endpoints
	postgresURL string
	zookeeper   string // comma-separated ZooKeeper servers
	server      string // remote dlock serve; not for serve itself
	authToken   string
	tls         clientTLSFlags // for --server (tlsflags.go)
	prefix      string
	// fenceRetention: how long a name's last fence is kept after the TTL
	// of its last hold (Valkey/Redis: its fence key; memory: its entry).
	fenceRetention time.Duration
	// replica: the store serves leases that other replicas of dlock serve
	// share (set by serve): on ZooKeeper a hold another replica took over
	// moves back into this process's session when extended here
	// (zookeeper.WithTakeOver), or the other replica's reaper would end it
	// at its own deadline while this replica's Extend answered nil.
	replica bool
}

// register defines the store flags; client adds --server and makes
// --auth-token the token sent to it.
func (s *storeFlags) register(fs *flagSet, client bool) {
	fs.String(&s.redisURL, "redis-url", "URL", "DLOCK_REDIS_URL", "",
		"Valkey/Redis URL: redis://[user:pass@]host:port[/db], rediss:// for TLS; a cluster node works too")
	fs.String(&s.redlockURLs, "redlock-urls", "URL,...", "DLOCK_REDLOCK_URLS", "",
		"comma-separated URLs of independent Valkey/Redis nodes for Redlock (a majority must agree)")
	fs.String(&s.etcd, "etcd-endpoints", "HOST:PORT,...", "DLOCK_ETCD_ENDPOINTS", "",
		"comma-separated etcd endpoints (store/etcd: fences rise past a snapshot restore, loss when the session ends)")
	fs.String(&s.postgresURL, "postgres-url", "URL", "DLOCK_POSTGRES_URL", "",
		"PostgreSQL URL, postgres://user:pass@host:5432/db (store/postgres: a lease table judged by the database clock)")
	fs.String(&s.zookeeper, "zookeeper-servers", "HOST:PORT,...", "DLOCK_ZOOKEEPER_SERVERS", "",
		"comma-separated ZooKeeper servers (store/zookeeper: ephemeral-sequential nodes, fences rise past a restore)")
	fs.String(&s.prefix, "key-prefix", "PREFIX", "DLOCK_KEY_PREFIX", "lock:",
		"prefix of the Valkey/Redis keys: the mutex on NAME is the key PREFIX+NAME")
	fs.Duration(&s.fenceRetention, "fence-retention", "DLOCK_FENCE_RETENTION", valkey.DefaultFenceRetention,
		"how long a lock name's last fence is kept after its last hold's TTL ends (Valkey/Redis: its fence key; memory: its entry); Valkey/Redis and serve's memory store")
	if client {
		fs.String(&s.server, "server", "URL", "DLOCK_SERVER", "",
			"URL of a remote dlock serve, e.g. http://locks.internal:3009")
		fs.String(&s.authToken, "auth-token", "TOKEN", "DLOCK_AUTH_TOKEN", "",
			"bearer token for --server")
		s.tls.register(fs)
	}
}

// errNoStore is the usage error of a client command without a shared store.
var errNoStore = errors.New("needs a shared store: set --redis-url, --redlock-urls, --etcd-endpoints, --postgres-url, " +
	"--zookeeper-servers or --server (env DLOCK_REDIS_URL, DLOCK_REDLOCK_URLS, DLOCK_ETCD_ENDPOINTS, DLOCK_POSTGRES_URL, " +
	"DLOCK_ZOOKEEPER_SERVERS, DLOCK_SERVER); a lock that lives only in this process would protect nothing")

// errNoElectStore is errNoStore for dlock elect, which a remote server
// cannot serve.
var errNoElectStore = errors.New("needs a shared store: set --redis-url, --redlock-urls, --etcd-endpoints, --postgres-url " +
	"or --zookeeper-servers (env DLOCK_REDIS_URL, DLOCK_REDLOCK_URLS, DLOCK_ETCD_ENDPOINTS, DLOCK_POSTGRES_URL, " +
	"DLOCK_ZOOKEEPER_SERVERS); an election that lives only in this process would elect everyone")

// backend is an open store.
type backend struct {
	store store.Store
	name  string // memory, valkey, redlock or server: for logs and metrics
	desc  string // where it is, without credentials
	close func()
}

// configured reports whether a store flag is set, and an error when more
// than one is.
func (s *storeFlags) configured() (bool, error) {
	n := 0
	for _, v := range []string{s.redisURL, s.redlockURLs, s.etcd, s.postgresURL, s.zookeeper, s.server} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		return false, errors.New("set only one of --redis-url, --redlock-urls, --etcd-endpoints, --postgres-url, --zookeeper-servers and --server")
	}
	return n == 1, nil
}

// open opens the selected store. With no store flag it returns nil.
func (s *storeFlags) open(ctx context.Context, log *slog.Logger) (*backend, error) {
	if s.server == "" && s.tls.set() {
		return nil, &dlock.InvalidError{Field: s.tls.first(), Reason: "--" + s.tls.first() + " applies to --server only (--ca-file, --cert and --key are for an https:// dlock server)"}
	}
	if s.server != "" && s.prefix != "lock:" {
		return nil, &dlock.InvalidError{Field: "key-prefix", Reason: "is set by the server, not its clients"}
	}
	if s.fenceRetention < time.Second {
		return nil, &dlock.InvalidError{Field: "fence-retention", Reason: "must be at least 1s"}
	}
	if (s.etcd != "" || s.postgresURL != "" || s.zookeeper != "" || s.server != "") && s.fenceRetention != valkey.DefaultFenceRetention {
		return nil, &dlock.InvalidError{Field: "fence-retention", Reason: "applies to the Valkey/Redis and memory stores only"}
	}
	switch {
	case s.redisURL != "":
		st, closeFn, err := s.dialValkey(ctx, s.redisURL, log)
		if err != nil {
			return nil, err
		}
		return &backend{store: st, name: "valkey", desc: redactURL(s.redisURL), close: closeFn}, nil
	case s.redlockURLs != "":
		var urls []string
		for _, u := range strings.Split(s.redlockURLs, ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
		if len(urls) == 0 {
			return nil, &dlock.InvalidError{Field: "redlock-urls", Reason: "no URL given"}
		}
		st, closeFn, err := s.openRedlock(ctx, urls, log)
		if err != nil {
			return nil, err
		}
		descs := make([]string, len(urls))
		for i, u := range urls {
			descs[i] = redactURL(u)
		}
		return &backend{store: st, name: "redlock", desc: strings.Join(descs, ","), close: closeFn}, nil
	case s.etcd != "":
		return s.openCoordination(ctx, "etcd", s.etcd, log)
	case s.postgresURL != "":
		return s.openCoordination(ctx, "postgres", s.postgresURL, log)
	case s.zookeeper != "":
		return s.openCoordination(ctx, "zookeeper", s.zookeeper, log)
	case s.server != "":
		tlsc, err := s.tls.config(s.server)
		if err != nil {
			return nil, err
		}
		st, err := httpstore.New(s.server, httpstore.WithAuthToken(s.authToken), httpstore.WithUserAgent("dlock-cli"),
			httpstore.WithTLSConfig(tlsc))
		if err != nil {
			return nil, err
		}
		return &backend{store: st, name: "server", desc: st.String(), close: func() { st.Close() }}, nil
	}
	return nil, nil
}

// redactURL hides the password of a store URL.
func redactURL(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if j := strings.Index(rest[:at], "/"); j < 0 {
				user, _, hasPass := strings.Cut(rest[:at], ":")
				if hasPass {
					return raw[:i+3] + user + ":xxxxx" + rest[at:]
				}
			}
		}
	}
	return raw
}

// closeAll closes every closer, for multi-node stores.
func closeAll(cs []io.Closer) func() {
	return func() {
		for _, c := range cs {
			c.Close()
		}
	}
}

// openClient opens the shared store of a client command, or reports that
// none is configured.
func (x *cmd) openClient(ctx context.Context) (*backend, int) {
	ok, err := x.store.configured()
	if err != nil {
		return nil, x.usageFail("%v", err)
	}
	if !ok && x.command == electCmd {
		return nil, x.usageFail("%v", errNoElectStore)
	}
	if !ok {
		return nil, x.usageFail("%v", errNoStore)
	}
	b, err := x.store.open(ctx, x.logger(slog.LevelWarn))
	if err != nil {
		return nil, x.fail(wrap("opening the "+storeKind(&x.store)+" store", err))
	}
	return b, 0
}

func storeKind(s *storeFlags) string {
	switch {
	case s.redisURL != "":
		return "valkey"
	case s.redlockURLs != "":
		return "redlock"
	case s.etcd != "":
		return "etcd"
	case s.postgresURL != "":
		return "postgres"
	case s.zookeeper != "":
		return "zookeeper"
	case s.server != "":
		return "remote"
	}
	return "memory"
}
