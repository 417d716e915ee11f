// Package goredis is the [store.Store] on Valkey or Redis (6.2 or later)
// through the caller's own go-redis client (github.com/redis/go-redis/v9):
// a *redis.Client (one node, or a Sentinel failover client) or a
// *redis.ClusterClient, as a redis.UniversalClient. Teams that already run
// go-redis use dlock without a second Redis client.
//
// It runs the operations of package github.com/dlock-dev/dlock/store/valkey
// (one implementation of them over either client), with the same Lua
// scripts on the same keys: a lock taken through one is held for the other,
// and for every library that speaks "SET key token NX PX" with
// compare-and-delete (redsync, bsm/redislock, node-redlock). Every pattern,
// fencing (monotonic across a restart of a node that kept nothing, see
// [WithFenceRetention]), and retries idempotent per token work as that
// package documents them, and so do the functions: on Redis 7 and Valkey
// the mutex's uncontended acquire and release go by FCALL, their library
// loaded where a server lacks it, and by EVALSHA where the server or the
// user's ACL has no functions.
//
// # Wake-ups
//
// Waiters are woken by the server. A contended mutex (dlock.Mutex.Lock)
// and the fair lock are handed over inside the release script, which
// publishes the grant on a shard channel of the waiter's Store (SPUBLISH;
// PUBLISH before Redis 7), subscribed with SSUBSCRIBE while the Store has
// waiters on the lock: a release by any process wakes one waiter, already
// holding the lock. Each such lock holds one pub/sub connection, kept for
// ten seconds after its last waiter.
//
// Every other wake-up (the other patterns, a foreign holder's DEL, an
// expiry) comes from RESP3-era client-side caching in its RESP2 form:
// per node, the Store opens two connections of its own from the client's
// options, a pub/sub connection subscribed to "__redis__:invalidate" and a
// connection with CLIENT TRACKING ON REDIRECT <that connection> OPTIN that
// makes a tracked read of each watched key. The server then pushes an
// invalidation when such a key is written, deleted or expires, by anyone.
// Why not the pushes on go-redis's own connections, as store/valkey does on
// valkey-go's: go-redis pools its connections, and a push arrives on the
// connection that made the tracked read, read only when that connection is
// next used, so it could not wake a waiter on time. When a tracking
// connection fails, every waiter is woken and retries; the connections are
// made anew. A client that is neither a *redis.Client nor a
// *redis.ClusterClient (a Ring) gets handoffs only, and its other waiters
// rely on the Locker's timer at the holder's remaining TTL.
//
// # What it does not guarantee
//
// As for store/valkey: a single node is a single point of truth, a
// failover may lose a grant (fences still increase and protect the
// resource), and a node whose maxmemory-policy evicts keys may drop a held
// lock (New warns, or fails under [WithStrictEviction]).
package goredis

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// ErrEvictionPolicy reports, under [WithStrictEviction], a node whose
// maxmemory-policy may evict lock keys.
var ErrEvictionPolicy = redisproto.ErrEvictionPolicy

// EvictionError is returned under [WithStrictEviction] when a node's
// maxmemory-policy may evict lock keys: Node is the node's address, Policy
// its maxmemory-policy. It wraps [ErrEvictionPolicy].
type EvictionError = redisproto.EvictionError

// Store is a [store.Store] on a go-redis client. It is safe for concurrent
// use. Make one with [New]; Close it when done (the client stays open).
type Store struct {
	client redis.UniversalClient
	d      *driver // the client as redisproto.Client
	core   *redisproto.Store
	cfg    config
	l      *redisproto.Layout
	hub    *redisproto.Hub // wakes this Store's waiters (Watch)
	track  tracker         // server-side tracking of the watched keys

	closeOnce sync.Once
}

// An Option configures a [Store]. Invalid values make [New] return an error
// wrapping [store.ErrInvalid].
type Option func(*config)

type config struct{ redisproto.Options }

// DefaultPrefix is [WithPrefix]'s default, as store/valkey's.
const DefaultPrefix = redisproto.DefaultPrefix

// DefaultFenceRetention is [WithFenceRetention]'s default.
const DefaultFenceRetention = redisproto.DefaultFenceRetention

// WithPrefix sets the prefix of every lock key: the mutex on name is the
// string key prefix+name. Default "lock:". Use the same prefix as the
// store/valkey Stores and foreign libraries that share the locks. With an
// empty prefix, or one that starts with "{", a name whose key would have the
// form of another name's auxiliary key ("{x}:fence") is refused.
func WithPrefix(p string) Option { return func(c *config) { c.Prefix = p } }

// WithFenceRetention sets how long a lock name's fence key stays after the
// TTL of its last hold ends (as store/valkey's option of the same name).
// Default 61 s ([DefaultFenceRetention]); at least a second. See
// store/valkey's WithFenceRetention.
func WithFenceRetention(d time.Duration) Option {
	return func(c *config) { c.SetFenceRetention(d) }
}

// WithStrictEviction makes New fail with an [*EvictionError] when a node's
// maxmemory-policy may evict lock keys; without it such a policy is logged
// as a warning. A node that does not answer CONFIG GET is logged, not an
// error.
func WithStrictEviction() Option { return func(c *config) { c.StrictEviction = true } }

// WithLogger sets the logger for warnings and debug messages. Default:
// discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.SetLogger(l) }
}

// setupTimeout bounds the checks New makes at start (CONFIG GET).
const setupTimeout = 5 * time.Second

// New returns a Store over client (a *redis.Client, a Sentinel failover
// client or a *redis.ClusterClient), which the caller keeps owning: Close
// does not close it. At start it reads each master's maxmemory-policy (see
// [WithStrictEviction]).
//
// It returns an error wrapping [store.ErrInvalid] for a nil client or a bad
// option, and an [*EvictionError] under WithStrictEviction.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, &store.InvalidError{Field: "client", Reason: "must not be nil"}
	}
	cfg := config{redisproto.DefaultOptions()}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.Err != nil {
		return nil, cfg.Err
	}
	s := &Store{
		client: client,
		d:      &driver{c: client},
		cfg:    cfg,
		l:      redisproto.NewLayout(cfg.Prefix, cfg.FenceRetention),
	}
	s.track.s = s
	s.hub = redisproto.NewHub(s.track.arm, cfg.Logger)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	core, err := redisproto.NewStore(ctx, s.d, redisproto.Config{
		Name:    "goredis",
		Layout:  s.l,
		Hub:     s.hub,
		Pushes:  true,
		Options: cfg.Options,
	})
	if err != nil {
		return nil, err
	}
	s.core = core
	return s, nil
}

// Client returns the go-redis client the Store runs on.
func (s *Store) Client() redis.UniversalClient { return s.client }

// Close ends the Store's handoff subscriptions and key tracking and waits
// for them. It does
// not close the client. Operations after Close fail. Close is idempotent
// and returns nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.core.Close()
		s.track.close()
	})
	return nil
}
