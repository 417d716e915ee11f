package redisproto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"

	"github.com/dlock-dev/dlock/store"
)

// Store is the store.Store of both Redis stores, written once over a
// [Client]: store/valkey and store/goredis each adapt their client and
// document their methods, which call these. Make one with NewStore.
type Store struct {
	c      Client
	name   string // of the store in errors: "valkey", "goredis"
	l      *Layout
	hub    *Hub
	log    *slog.Logger
	grants Handoffs // handoffs to the Store's waiters (WatchGrant)
	bus    Bus      // Publish and Subscribe
	// legacy: the server lacks SSUBSCRIBE and SPUBLISH (before Redis 7),
	// learnt from its first refusal: use SUBSCRIBE and PUBLISH.
	legacy  atomic.Bool
	track   Tracker   // Config.Tracker
	confirm Confirmer // Config.Confirmer
	closed  atomic.Bool
}

var (
	_ store.Store        = (*Store)(nil)
	_ store.Inspector    = (*Store)(nil)
	_ store.Pinger       = (*Store)(nil)
	_ store.GrantWatcher = (*Store)(nil)
	_ store.FenceRaiser  = (*Store)(nil)
	_ store.MultiStore   = (*Store)(nil)
	_ store.Elector      = (*Store)(nil)
	_ store.Broadcaster  = (*Store)(nil)
)

// Config is what a Store needs besides its Client.
type Config struct {
	// Name is the store's name in errors ("valkey", "goredis").
	Name string
	// Layout names the keys; the store made it with its options.
	Layout *Layout
	// Hub wakes the Store's waiters; the Client's invalidations feed it.
	Hub *Hub
	// Pushes: the server's invalidations of the keys the Hub arms reach
	// it, so NewStore starts it (and Close stops it).
	Pushes bool
	// Tracker, if set, makes the acquire attempts of the Store's waiters
	// tracked reads of their watch key (the Client, when it can).
	Tracker Tracker
	// Confirmer, if set, has every write a lease counts on (a grant, an
	// extension, a raised fence) confirmed by replicas: the Client, when
	// asked to. The Store then hands no lock over by pub/sub, whose
	// message no replica confirms (WatchGrant is refused), and takes no
	// multi-lock atomically.
	Confirmer Confirmer
	// Options are the store's: NewStore fails on a node whose
	// maxmemory-policy may evict lock keys under StrictEviction (and logs a
	// warning otherwise), and the Store logs to Logger.
	Options
}

// NewStore returns the Store of c. It reads every primary's
// maxmemory-policy, within ctx, and returns an [*EvictionError] for one
// that may evict lock keys under Options.StrictEviction.
func NewStore(ctx context.Context, c Client, cfg Config) (*Store, error) {
	s := &Store{c: c, name: cfg.Name, l: cfg.Layout, hub: cfg.Hub, log: cfg.Logger, track: cfg.Tracker, confirm: cfg.Confirmer}
	sub := subscriber{s}
	s.grants.Sub, s.grants.Log = sub, cfg.Logger
	s.bus.Sub, s.bus.Log = sub, cfg.Logger
	if err := s.checkEviction(ctx, cfg.StrictEviction); err != nil {
		return nil, err
	}
	if cfg.Pushes {
		s.hub.Start()
	}
	return s, nil
}

// Close stops the Store's wake-ups and waits for them; operations after
// Close fail. The Client stays open. Call it once.
func (s *Store) Close() {
	s.closed.Store(true)
	s.bus.Close()
	s.grants.Close()
	s.hub.Stop()
}

// errClosed returns the error of operation op after Close.
func (s *Store) errClosed(op string) error {
	return fmt.Errorf("dlock: %s %s: store closed", s.name, op)
}

// fail classifies an error of operation op: failures to reach the server or
// transient server states become a [*store.StoreError] (wrapping
// [store.ErrUnavailable], so callers retry); other error replies (a key of
// the wrong type, a script error) and use of a closed client are returned
// wrapped, not as unavailability, so that waiting callers stop.
func (s *Store) fail(op string, err error) error {
	if s.c.Closed(err) {
		return fmt.Errorf("dlock: %s %s: client closed: %w", s.name, op, err)
	}
	if msg, ok := s.c.ServerError(err); ok {
		if Transient(msg) {
			return &store.StoreError{Op: op, Node: -1, Err: err}
		}
		return fmt.Errorf("dlock: %s %s: %w", s.name, op, err)
	}
	return &store.StoreError{Op: op, Node: -1, Err: err}
}

// ops returns the scripts of mode m, or an error wrapping
// [store.ErrNotSupported].
func (s *Store) ops(m store.Mode) (*Ops, error) { return ModeOps(m, s.name) }

// eval runs one call of sc.
func (s *Store) eval(ctx context.Context, sc *Script, keys, args []string) Reply {
	return s.c.Eval(ctx, Call{Script: sc, Keys: keys, Args: args})
}

// Ping implements [store.Pinger].
func (s *Store) Ping(ctx context.Context) error {
	if err := s.c.Ping(ctx); err != nil {
		return s.fail("ping", err)
	}
	return nil
}

// ErrEvictionPolicy reports, under Options.StrictEviction, a node whose
// maxmemory-policy may evict lock keys.
var ErrEvictionPolicy = errors.New("dlock: maxmemory-policy may evict lock keys")

// EvictionError is returned under Options.StrictEviction when a node's
// maxmemory-policy may evict lock keys. It wraps [ErrEvictionPolicy].
type EvictionError struct {
	Node   string // address of the node
	Policy string // its maxmemory-policy
}

func (e *EvictionError) Error() string {
	return "dlock: maxmemory-policy " + e.Policy + " on " + e.Node + " may evict lock keys"
}

func (e *EvictionError) Unwrap() error { return ErrEvictionPolicy }

// checkEviction reads every primary's maxmemory-policy and warns about (or,
// strict, refuses) a policy that may evict lock keys, the first node by
// address. Nodes that do not answer CONFIG GET are logged and skipped.
func (s *Store) checkEviction(ctx context.Context, strict bool) error {
	nodes := s.c.Policies(ctx)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Addr < nodes[j].Addr })
	for _, n := range nodes {
		switch {
		case n.Err != nil || n.Policy == "":
			s.log.Info("dlock: could not read maxmemory-policy; make sure it is noeviction", "node", n.Addr, "err", n.Err)
		case n.Policy == "noeviction":
		case strict:
			return &EvictionError{Node: n.Addr, Policy: n.Policy}
		default:
			s.log.Warn("dlock: maxmemory-policy may evict lock keys, freeing held locks; set it to noeviction",
				"node", n.Addr, "policy", n.Policy)
		}
	}
	return nil
}
