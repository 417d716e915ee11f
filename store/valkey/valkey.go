// Package valkey is the [store.Store] on Valkey or Redis (6.2 or later): one
// node, a primary with replicas, or a Redis Cluster, through valkey-go.
//
// # Keys
//
// The mutex on name is the string key prefix+name ("lock:<name>" by default)
// holding the holder's token, so dlock interoperates with every library
// speaking the de facto "SET key token NX PX ttl" + compare-and-delete
// protocol (redsync, bsm/redislock, node-redlock, redis-py's Lock): a lock
// held by one is held for the others. Auxiliary keys of a lock (its fence
// key, "{lock:<name>}:fence") share the main key's cluster hash slot, so
// every operation is one Lua script, one round trip.
//
// # Scripts and functions
//
// The scripts go by EVALSHA (by EVAL once, when the server does not know
// one). On Redis 7 and Valkey the mutex's uncontended acquire and release,
// the hot path, go by FCALL as functions: their shared Lua functions are
// made once when the library loads instead of on every call (about 8 % of
// the server's instructions per acquire and release). The Store loads a
// library (FUNCTION LOAD, with the call, in one round trip; on every
// master of a cluster) the first time a server answers that it does not
// have it, and goes by EVALSHA for good from the first answer that shows
// no functions: a server before 7.0, a proxy without FCALL, or a user whose
// ACL does not allow FUNCTION LOAD. Library names are "dlock_" and a digest
// of the source, so each dlock version loads its own (a few KB each;
// FUNCTION FLUSH or FUNCTION DELETE drops those no running version uses).
//
// # Fences
//
// Every grant issues its fence atomically with the grant from two keys: the
// name's fence key, the last fence of the name, kept beside its holds and
// for [WithFenceRetention] (61 s) after; and the fence mark of the name's
// hash slot, one key per slot without expiry. A grant that finds the fence
// key issues its value + 1; one that does not issues max(mark + 1, server
// time in ms*1000, the clock floor). So fences rise per name while the node
// keeps its data whatever its clock does, and across a restart of a node
// that kept nothing on disk unless its clock stepped back (see
// docs/safety.md); and a name that is not held keeps nothing on the server
// once its fence key expired.
//
// # Wake-ups
//
// Waiters are woken by the server: a Store made by [Dial] or [Open] tracks
// the keys that its waiters wait for with RESP3 client-side caching
// (CLIENT TRACKING), and the server pushes an invalidation when such a key is
// written, deleted or expires, whoever did it. A waiter's refused attempt
// is itself the tracked read (CLIENT CACHING YES rides along in the same
// round trip), and one push serves every waiter of the process. A holder's
// renewal also wakes waiters, who find the lock still held.
//
// A contended mutex or fair lock is handed over instead: a refused waiter of
// dlock.Mutex.Lock registers its token in the sorted set
// "{lock:<name>}:waiters" (a lease of its queue TTL, judged by the server's
// clock; a string "{lock:<name>}:waiters:flag" outlives the set, so that a
// release learns whether to look for waiters from the read that compares
// the token), and the release script that finds a live registration sets the
// lock key to that waiter's token (so the key still holds exactly the
// holder's token, and SET NX clients stay excluded), issues the fence, and
// publishes the grant on the waiter's Store's shard channel (see
// [Store.WatchGrant]). One release wakes one waiter, already holding the
// lock: about one round trip from release to grant. Registered waiters
// still retry at the holder's expiry, and a lock freed by expiry goes to
// whoever asks first: the mutex is not fair (the fair lock is). A
// registered waiter is not woken by the server's push when another
// library's client releases the key (its DEL hands nothing over): it finds
// the lock free when it refreshes its registration, every third of its
// queue TTL (dlock.WithQueueTTL), or at the holder's expiry. A waiter
// whose process dies keeps its registration until its queue TTL runs out;
// a release within that time may hand it the lock, which then stays taken
// until the lease TTL it asked for runs out.
//
// A Store made
// by [New] over a client
// the caller built cannot receive those pushes (the hook must be set when
// the client is made); its waiters are woken by releases made through the
// same Store, and otherwise by the Locker's timer at the remaining TTL and
// its backoff. Use [Open] to bring your own valkey.ClientOption and keep
// the wake-ups.
//
// # Connections
//
// A client with an invalidation hook sends every command through valkey-go's
// pipeline goroutines (a push may come at any time, so its connections are
// always read). A Store made by [Dial] or [Open] therefore keeps a second
// client of the same options without client-side caching, and runs on it
// the calls that need no tracked read and carry a deadline (every call a
// Locker makes does): a lone caller's call is written and read on its
// connection directly, with no goroutine handoff. Calls for a ctx that can
// be cancelled but has no deadline stay on the pipelined client, which gives
// them up at once when ctx ends. So such a Store holds the connections of
// two valkey-go clients.
//
// valkey-go keeps several connections per server (two on 2 cores, four from
// 4) and picks one per call. When the server restarts or fails over, each
// of them that was open fails its next call (EOF, a reset) and is replaced.
// The Store sends a call that met a broken connection again, up to four
// times while ctx lasts: every script is idempotent per token, so a
// repeated acquire or extend gets the answer the first would have, and a
// release repeated after the first took effect reports [store.ErrNotHeld].
// A server that stays down fails the call with the connection error.
//
// # What it does not guarantee
//
// A single node is a single point of truth: if it fails over to a replica
// that had not received a grant, or restarts without persistence, a lock may
// be granted twice (fences still increase, and they are what protects the
// resource). [WithWaitReplicas] narrows the failover window; it is not
// consensus. A node whose maxmemory-policy evicts keys may drop a held lock;
// the constructors warn about it (or fail, [WithStrictEviction]).
package valkey

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

var (
	// ErrNotReplicated reports a write that fewer replicas than
	// [WithWaitReplicas] asked for confirmed in time: a grant (released
	// before returning), an extension or a raised fence (kept by the
	// server; the caller counts on what it had before). It wraps
	// [store.ErrUnavailable], so a Locker's Lock retries and a lease's
	// renewal tries again while the lease is valid.
	ErrNotReplicated = fmt.Errorf("%w: write not confirmed by replicas", store.ErrUnavailable)
	// ErrEvictionPolicy reports, under [WithStrictEviction], a node whose
	// maxmemory-policy may evict lock keys.
	ErrEvictionPolicy = redisproto.ErrEvictionPolicy
)

// EvictionError is returned under [WithStrictEviction] when a node's
// maxmemory-policy may evict lock keys: Node is the node's address, Policy
// its maxmemory-policy. It wraps [ErrEvictionPolicy].
type EvictionError = redisproto.EvictionError

// ReplicationError is returned, under [WithWaitReplicas], by Acquire when
// a grant was not confirmed by enough replicas in time (the grant was
// released before returning), by Extend for an extension (the server keeps
// the new TTL; the lease keeps its old validity) and by RaiseFence for a
// raised fence (the server keeps it). It wraps [ErrNotReplicated] and,
// when the write before WAIT or WAIT itself failed, that error.
type ReplicationError struct {
	Op    string // "acquire", "extend" or "fence"
	Name  string // lock name
	Want  int    // replicas asked for
	Acked int    // replicas that confirmed within the timeout
	Err   error  // the error of the write before WAIT or of WAIT, or nil
}

func (e *ReplicationError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("dlock: valkey %s of %q not confirmed by replicas: %v", e.Op, e.Name, e.Err)
	}
	return fmt.Sprintf("dlock: valkey %s of %q confirmed by %d of %d replicas", e.Op, e.Name, e.Acked, e.Want)
}

func (e *ReplicationError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrNotReplicated, e.Err}
	}
	return []error{ErrNotReplicated}
}

// Store is a [store.Store] on Valkey or Redis. It is safe for concurrent use.
// Make one with [New], [Dial] or [Open]; Close it when done.
type Store struct {
	client vk.Client
	d      *driver // the client (and its twin) as redisproto.Client
	core   *redisproto.Store
	own    bool // Close closes client
	cfg    config
	l      *redisproto.Layout // key layout, fence retention, handoff channels
	hub    *redisproto.Hub    // wakes waiters; the client's invalidations feed it (watch.go)

	closeOnce sync.Once
}

// setupTimeout bounds the checks New makes at start (CONFIG GET).
const setupTimeout = 5 * time.Second

// New returns a Store over client, which the caller keeps owning: Close does
// not close it. At start it reads each node's maxmemory-policy (see
// [WithStrictEviction]). Waiters on a Store made by New are not woken by the
// server (see the package doc, "Wake-ups"); prefer [Dial] or [Open].
//
// It returns an error wrapping [store.ErrInvalid] for a nil client or a bad
// option, and [ErrEvictionPolicy] under WithStrictEviction.
func New(client vk.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, &store.InvalidError{Field: "client", Reason: "must not be nil"}
	}
	s, err := newStore(opts)
	if err != nil {
		return nil, err
	}
	s.client, s.d.c = client, client
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := s.start(ctx, false, false); err != nil {
		return nil, err
	}
	return s, nil
}

// Dial connects to the server(s) at url and returns a Store that owns the
// connection: Close closes it. The URL is redis://, rediss:// (TLS),
// valkey://, valkeys:// or unix://, as valkey.ParseURL reads it
// ("redis://user:password@host:port/db"). Several seed nodes of a Redis
// Cluster are separated by commas, either in the host part
// ("redis://:pw@h1:7000,h2:7001,h3:7002") or as whole URLs
// ("redis://h1:7000,redis://h2:7001"); options come from the first.
// A single address that serves a cluster is detected too. With master_set
// in the query ("redis://s1:26379,s2:26379,s3:26379?master_set=mymaster")
// the hosts are Redis Sentinels: the Store asks them for the primary of
// that name and follows it through failovers (valkey-go's Sentinel client;
// fault scenarios T28 in docs/faults.md).
//
// ctx bounds the checks made at start. Dial returns an error wrapping
// [store.ErrInvalid] for a bad URL or option, a [*store.StoreError] when the
// server cannot be reached, and [ErrEvictionPolicy] under
// [WithStrictEviction].
func Dial(ctx context.Context, url string, opts ...Option) (*Store, error) {
	opt, err := parseURL(url)
	if err != nil {
		return nil, &store.InvalidError{Field: "url", Reason: err.Error()}
	}
	return Open(ctx, opt, opts...)
}

// Open makes a valkey-go client from opt and returns a Store that owns it:
// Close closes it. Use it to set what a URL cannot say (timeouts, TLS
// details, Sentinel options beyond the master name). Open adds its own invalidation hook for server-pushed
// wake-ups and still calls opt.OnInvalidations, if set; with
// opt.DisableCache, or against a server without RESP3, waiters get no
// server wake-ups (see the package doc). Errors are those of [Dial].
func Open(ctx context.Context, opt vk.ClientOption, opts ...Option) (*Store, error) {
	s, err := newStore(opts)
	if err != nil {
		return nil, err
	}
	tracking := !opt.DisableCache
	user := opt.OnInvalidations
	if tracking {
		opt.OnInvalidations = func(keys []vk.ValkeyMessage) {
			s.invalidated(keys)
			if user != nil {
				user(keys)
			}
		}
	}
	client, err := vk.NewClient(opt)
	if tracking && errors.Is(err, vk.ErrNoCache) {
		s.cfg.Logger.Info("dlock: server lacks RESP3 client-side caching; waiters are not woken by the server")
		tracking = false
		opt.DisableCache, opt.OnInvalidations = true, user
		client, err = vk.NewClient(opt)
	}
	if err != nil {
		return nil, &store.StoreError{Op: "dial", Node: -1, Err: err}
	}
	s.client, s.own, s.d.c = client, true, client
	// Tracked attempts need the default OPTIN tracking and the shared,
	// always-read pipelined connections (WAIT and a disabled auto-pipeline
	// use pooled ones, whose pushes wait until their next use).
	trackAcquire := tracking && opt.ClientTrackingOptions == nil && !opt.DisableAutoPipelining && s.cfg.waitReplicas == 0
	if tracking {
		popt := opt
		popt.DisableCache, popt.OnInvalidations, popt.ClientTrackingOptions = true, nil, nil
		if s.d.plain, err = vk.NewClient(popt); err != nil {
			client.Close()
			return nil, &store.StoreError{Op: "dial", Node: -1, Err: err}
		}
	}
	if err := s.start(ctx, tracking, trackAcquire); err != nil {
		s.closeClients()
		return nil, err
	}
	return s, nil
}

func newStore(opts []Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.Err != nil {
		return nil, cfg.Err
	}
	l := redisproto.NewLayout(cfg.Prefix, cfg.FenceRetention)
	s := &Store{cfg: cfg, l: l, d: &driver{l: l, waitReplicas: cfg.waitReplicas, waitTimeout: cfg.waitTimeout}}
	s.hub = redisproto.NewHub(s.armKeys, cfg.Logger)
	return s, nil
}

// start makes the Store's redisproto.Store, which checks the eviction
// policy and, with tracking (the client's invalidations reach the hub),
// starts the goroutine that arms server-side tracking for watched keys;
// with trackAcquire, acquire attempts are tracked reads too.
func (s *Store) start(ctx context.Context, tracking, trackAcquire bool) error {
	cfg := redisproto.Config{
		Name:    "valkey",
		Layout:  s.l,
		Hub:     s.hub,
		Pushes:  tracking,
		Options: s.cfg.Options,
	}
	if trackAcquire {
		cfg.Tracker = s.d
	}
	if s.cfg.waitReplicas > 0 {
		cfg.Confirmer = s.d
	}
	core, err := redisproto.NewStore(ctx, s.d, cfg)
	s.core = core
	return err
}

// Client returns the valkey-go client the Store runs on.
func (s *Store) Client() vk.Client { return s.client }

// Close stops the Store's wake-up tracking and waits for it, and closes the
// client if the Store made it ([Dial], [Open]). Watch channels stop
// receiving; operations after Close fail. Close is idempotent and returns
// nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.core.Close()
		if s.own {
			s.closeClients()
		}
	})
	return nil
}

func (s *Store) closeClients() {
	s.client.Close()
	if s.d.plain != nil {
		s.d.plain.Close()
	}
}

// parseURL turns a URL, possibly with several comma-separated seeds, into a
// client option.
func parseURL(raw string) (vk.ClientOption, error) {
	if !strings.Contains(raw, ",") {
		return vk.ParseURL(raw)
	}
	var seeds []string
	if strings.Count(raw, "://") > 1 { // "redis://h1:1,redis://h2:2"
		var first vk.ClientOption
		for i, part := range strings.Split(raw, ",") {
			o, err := vk.ParseURL(strings.TrimSpace(part))
			if err != nil {
				return vk.ClientOption{}, err
			}
			if i == 0 {
				first = o
			}
			seeds = append(seeds, o.InitAddress...)
		}
		first.InitAddress = seeds
		return first, nil
	}
	// "redis://user:pw@h1:1,h2:2,h3:3/0?x=y": seeds in the host part.
	i := strings.Index(raw, "://")
	if i < 0 {
		return vk.ParseURL(raw) // reports the error
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	at := strings.LastIndex(authority, "@")
	hosts := strings.Split(authority[at+1:], ",")
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			return vk.ClientOption{}, fmt.Errorf("empty seed in %q", raw)
		}
		if !strings.Contains(h, ":") || strings.HasSuffix(h, "]") {
			h += ":6379"
		}
		seeds = append(seeds, h)
	}
	o, err := vk.ParseURL(raw[:i+3] + authority[:at+1] + hosts[0] + rest[end:])
	if err != nil {
		return vk.ClientOption{}, err
	}
	o.InitAddress = seeds
	return o, nil
}
