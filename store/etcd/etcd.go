package etcd

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var (
	_ store.Store        = (*Store)(nil)
	_ store.Inspector    = (*Store)(nil)
	_ store.Pinger       = (*Store)(nil)
	_ store.GrantWatcher = (*Store)(nil)
)

// DefaultPrefix is the key prefix of a Store unless [WithPrefix] says
// otherwise.
const DefaultPrefix = "dlock/"

// maxAttempts bounds the optimistic retries of one Acquire when other
// clients change the lock between its read and its write.
const maxAttempts = 16

// An Option configures a [Store].
type Option func(*Store)

// WithPrefix sets the prefix of every key the store writes. Default
// [DefaultPrefix] ("dlock/").
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// Store is a [store.Store] on etcd. The zero value is not usable; call [New]
// or [NewWithClient]. A Store is safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	own    bool
	prefix string

	mu     sync.Mutex
	closed bool
	local  map[string]*local // holds and queue places this store granted, by key
	kick   chan struct{}     // wakes the reaper when a deadline moved in
	stop   chan struct{}     // closed by Close
	wg     sync.WaitGroup    // the reaper and WatchGrant goroutines
	bus    busState          // the lease of published messages (broadcast.go)
	floor  func() int64      // a fence's clock floor: wallFloor, or a test's clock
	// dead are the leases revoked for a lapsed TTL, for deadFor: a
	// keep-alive that reached etcd before the revocation renews nothing.
	dead map[clientv3.LeaseID]time.Time
}

// local is a hold or queue place granted through this store: its lease and
// its deadline on this process's monotonic clock.
type local struct {
	lease    clientv3.LeaseID
	deadline time.Time
}

// New connects to the etcd cluster at endpoints (host:port or URLs) and
// returns a store; Close closes the client. It fails when no endpoint
// answers within ctx (or 5s).
func New(ctx context.Context, endpoints []string, opts ...Option) (*Store, error) {
	if len(endpoints) == 0 {
		return nil, &store.InvalidError{Field: "etcd endpoints", Reason: "none given"}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, storeErr("connect", err)
	}
	s := NewWithClient(cli, opts...)
	s.own = true
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Ping(pctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// NewWithClient returns a store on the caller's client; Close leaves it
// open.
func NewWithClient(cli *clientv3.Client, opts ...Option) *Store {
	s := &Store{cli: cli, prefix: DefaultPrefix, floor: wallFloor, local: map[string]*local{}, dead: map[clientv3.LeaseID]time.Time{}, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.reap()
	}()
	return s
}

// Close stops the store's watchers, waits for them, and closes the client
// if New opened it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	s.wg.Wait()
	if s.own {
		return s.cli.Close()
	}
	return nil
}

// Client returns the store's etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

func storeErr(op string, err error) error { return &store.StoreError{Op: op, Node: -1, Err: err} }

var _ store.LockDelayer = (*Store)(nil)

// SupportsLockDelay implements [store.LockDelayer]: a hold's etcd lease
// expires on the etcd leader's clock.
func (s *Store) SupportsLockDelay() bool { return true }
