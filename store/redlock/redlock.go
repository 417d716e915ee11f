// Package redlock is a [store.Store] over N independent stores: the Redlock
// algorithm, with fencing tokens that stay monotonic across the nodes.
//
// A grant needs a majority (N/2+1) of the nodes to grant the same token, and
// a positive validity: TTL − elapsed − drift, measured on the client's
// monotonic clock from before the first request was sent, where drift is
// DriftFactor × TTL + 2ms. Requests go to every node at once; Acquire
// returns as soon as its outcome is decided, and when it fails it releases
// whatever it was granted on every node before returning, rather than
// leaving those keys to expire. It fails for lack of quorum, not as
// refused, whenever too few nodes answered to make a majority even if the
// lock were free. Extend needs a majority too. Release goes to every node
// and returns once a majority released; the releases to the other nodes
// run to their end in the background whatever the caller's context does
// (Close waits for them). A release still on its way to a minority does not
// make the next Acquire of the lock refused: through the same Store, that
// Acquire reaches the slow node after the release; through another, it
// finds the old token on a minority of the nodes only.
//
// Every grant carries a fence. After winning its majority, Acquire writes
// the fence it will return back to the nodes it holds that issued a lower
// one ([store.FenceRaiser]), and returns the grant only once a majority
// holds a counter at least that high. Every later winner's majority shares
// a node with that one, where it was granted after this holder's write, so
// its fence is higher. docs/safety.md gives the argument and what it
// assumes: nodes that never forget their fence state (a name's fence key or
// its slot's mark on Valkey/Redis; the hybrid clock floor after a restart
// without persistence, or persistence, or a restart delayed past the
// longest TTL) and clocks that do not step back on a node restarted empty.
//
// What Redlock does not give: a lease is exclusive only while clocks run at
// about the same rate, and only until it ends by the holder's clock. A
// process paused past its lease (GC, SIGSTOP, a VM migration), or a node
// whose clock jumps forward and expires the key early, lets two holders
// believe they hold the lock at once. Only the fence, checked by the
// protected resource, makes the older holder harmless.
//
// Patterns: mutex, read-write and leader election when the nodes support
// them, with everything built on them (retry, watchdog, Do, Campaign,
// Observe). A leader's term is its fence, settled on every node that
// granted it before Acquire returns; [Store.Leader] reports the leader a
// majority of nodes agrees on, and only once Acquire has decided to return
// its grant (never a term that Acquire refused for lack of validity). An
// election waits for every node (or its node timeout), as a write lock
// does, and a read lock with a Holder or Data (see below). The fair queue, the semaphore and the reentrant lock cannot be
// kept consistent over a quorum (a lost reply leaves a count or a queue
// place that a retry cannot reconcile), so they return an error wrapping
// [store.ErrNotSupported].
//
// The Store is a [store.Inspector] when its nodes are: State and List (what
// `dlock status`, `dlock list` and the dashboard show) combine the nodes'
// answers as Redlock sees the lock, counting only what a majority holds.
//
// # A hold's record and bounds
//
// A request's Holder, Data, MinHold and MaxHold go to every node with it;
// each node records them with its own grant, by its own clock, and drops
// them with its hold. State's Owners are the holds the nodes agree on: the
// nodes never show tokens, so a hold is known by its holder and data, and
// there are as many holds of one holder and data as a majority of nodes
// have. Each one's Since is the quorum-th earliest of its nodes' grant
// times (when, by the nodes' clocks, a majority had granted it), and its
// Fence the highest fence its nodes report, for an exclusive hold at most
// State's Fence (a node that granted late may have issued a higher one).
// A reader's nodes may have issued it different fences, so a read Acquire
// with a Holder or Data waits for every node and returns the highest, as
// Owners show it (one without either returns at its majority, as before:
// its Owner "" may show a higher fence than it was given). A hold on a
// minority (an acquisition being undone) is not shown.
//
// MinHold (mutex and election): a Release before the end answers nil once
// a majority answered, and each node keeps its hold to its own grant +
// MinHold by its own clock; the name is free again once a majority of the
// nodes has let go. Every node grants after the Acquire was sent, so by
// the client's clock no other Acquire can win the name before send +
// MinHold, less what the nodes' clocks run fast over MinHold. Clock rates
// differ by far less than the drift factor's default 1 % (quartz with NTP:
// about 0.01 %); a caller that wants the interval whole by its own clock
// whatever the rates adds [Store.Drift] of it to MinHold. A holder that
// crashes is still bounded by its TTL on each node. An Acquire that fails
// (no majority, no validity left) would leave a MinHold hold on the nodes
// that granted it until their MinHold ends, where a release would keep it;
// so while its grants are sure to be the only holds of the name on those
// nodes (the TTL less the drift and a node timeout has not run out), it
// ends them with the nodes' ForceRelease, and afterwards sends them
// nothing (their TTL, about to run out, ends them). Without this, N
// replicas of a scheduled job that split the nodes' votes would all be
// refused for the whole interval.
//
// MaxHold: each node caps every grant and extension at its own grant +
// MaxHold, so an Acquire's validity counts from min(TTL, MaxHold), and an
// Extend past the end answers [store.ErrNotHeld] once more than N−quorum
// nodes have let the hold go. A node whose clock runs slow keeps the hold a
// little longer; alone it is a minority.
//
// Resume ([Store.Resume]) needs a majority of nodes to confirm the token
// and extend its hold; its validity counts from the send, as Extend's. Its
// fence is settled as an Acquire's is: the highest fence the confirming
// nodes report, written back to those that report less, and used once a
// majority holds a counter at least that high; so it is ordered against
// every other grant as the fence write-back argues (docs/safety.md,
// Fenced Redlock: the confirming majority plays the part of the grant's).
// It is the fence the grant settled on unless a node that granted the token
// late issued a higher one (the holder then uses that, still above every
// earlier holder's), or the confirming majority holds the grant's fence
// only as a raised counter on nodes that report the fence they issued
// (the memory store does): the lower fence it then returns is refused by a
// fenced resource that saw the higher one, which is safe but makes the
// resumed holder's writes fail. This Store remembers the fences it
// returned and resumes with the same one where a majority still reports
// no more.
//
// ForceRelease ([Store.ForceRelease]) ends the holds on every node and
// returns once a majority did. The nodes keep their fence counters, and
// the forced holder's settled majority held counters of at least its
// fence, so the next grant, whose majority shares a node with it, gets a
// higher fence: the forced holder's late writes are fenced out.
package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/store"
)

var (
	_ store.Store   = (*Store)(nil)
	_ store.Pinger  = (*Store)(nil)
	_ store.Drifter = (*Store)(nil)
)

// Store is a quorum of independent stores. It is safe for concurrent use.
// Create it with New; Close waits for requests still running on slow nodes
// after their caller got its answer. The operations on one lock name made
// through one Store reach each node in the order they were made, even when
// an earlier one returned before every node answered.
type Store struct {
	nodes   []store.Store
	raisers []store.FenceRaiser
	all     []int // 0..N-1
	quorum  int
	cfg     config

	mu     sync.RWMutex // guards closed against wg.Add
	closed bool
	wg     sync.WaitGroup // operations in flight and their node requests

	workers *workers // run the node requests

	fmu     sync.Mutex
	flights map[string]flights // see holds.go
	holds   map[holdKey]*hold
	sweepAt int
}

type config struct {
	nodeTimeout time.Duration // 0: derived from the TTL
	driftFactor float64
	logger      *slog.Logger
	err         error
}

// Option configures a Store.
type Option func(*config)

// WithNodeTimeout bounds each request to one node. A node that has not
// answered by then counts as failed for that operation. Default: a tenth
// of the request's TTL, at least 100ms and at most 500ms. Because Acquire
// returns as soon as a majority has answered, the timeout only matters when
// the outcome depends on slow nodes. At least 1ms.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.err = &store.InvalidError{Field: "node timeout", Reason: "must be at least 1ms"}
			return
		}
		c.nodeTimeout = d
	}
}

// WithDriftFactor sets the share of the TTL allowed for clock drift between
// the client and the nodes; 2ms is added to it. Default 0.01; from 0 to 0.5.
// The margin shortens every lease a dlock.Locker over the Store hands
// out, and every extension, when it is larger than the Locker's own (see
// [Store.Drift] and dlock.WithDriftFactor).
func WithDriftFactor(f float64) Option {
	return func(c *config) {
		if !(f >= 0 && f <= 0.5) {
			c.err = &store.InvalidError{Field: "drift factor", Reason: "must be between 0 and 0.5"}
			return
		}
		c.driftFactor = f
	}
}

// WithLogger sets the logger for node failures (at debug level). Default:
// discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.err = &store.InvalidError{Field: "logger", Reason: "must not be nil"}
			return
		}
		c.logger = l
	}
}

// New returns a Store over stores, which must be independent (no
// replication between them), odd in number and at least 3, and must each
// implement [store.FenceRaiser]. The Store does not own the stores: Close
// does not close them. It returns an [*store.InvalidError] for a bad
// argument or option.
func New(stores []store.Store, opts ...Option) (*Store, error) {
	n := len(stores)
	if n < 3 || n%2 == 0 {
		return nil, &store.InvalidError{Field: "stores", Reason: fmt.Sprintf("need an odd number of at least 3, got %d", n)}
	}
	cfg := config{driftFactor: 0.01, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	s := &Store{
		nodes:   append([]store.Store(nil), stores...),
		raisers: make([]store.FenceRaiser, n),
		all:     make([]int, n),
		quorum:  n/2 + 1,
		cfg:     cfg,
		flights: make(map[string]flights),
		holds:   make(map[holdKey]*hold),
		sweepAt: minSweep,
		workers: newWorkers(5 * time.Second),
	}
	for i, st := range stores {
		if st == nil {
			return nil, &store.InvalidError{Field: "stores", Reason: fmt.Sprintf("store %d is nil", i)}
		}
		fr, ok := st.(store.FenceRaiser)
		if !ok {
			return nil, &store.InvalidError{Field: "stores", Reason: fmt.Sprintf("store %d (%T) cannot raise fences (store.FenceRaiser)", i, st)}
		}
		s.raisers[i] = fr
		s.all[i] = i
	}
	return s, nil
}

// Nodes returns the number of nodes.
func (s *Store) Nodes() int { return len(s.nodes) }

// Quorum returns the number of nodes a grant needs: N/2+1.
func (s *Store) Quorum() int { return s.quorum }

// Close waits for the requests still running on slow nodes (each bounded by
// the node timeout; a release may first wait one node timeout for the
// earlier requests on its node) and makes later calls fail with [store.ErrClosed]. It
// does not close the nodes.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	s.workers.stop()
	return nil
}

// enter registers an operation; the caller must call s.wg.Done when it
// returns.
func (s *Store) enter() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%w: redlock store", store.ErrClosed)
	}
	s.wg.Add(1)
	return nil
}

// nodeTimeout is the per-node bound for a request of the given TTL.
func (s *Store) nodeTimeout(ttl time.Duration) time.Duration {
	if s.cfg.nodeTimeout > 0 {
		return s.cfg.nodeTimeout
	}
	return min(max(ttl/10, 100*time.Millisecond), 500*time.Millisecond)
}

// Drift implements [store.Drifter]: the clock-drift margin of a hold of
// ttl, DriftFactor × ttl + 2ms (see [WithDriftFactor]). Acquire refuses a
// grant that leaves no validity after it, and a dlock.Locker over the
// Store subtracts it (or its own margin, if larger) from every lease's
// validity.
func (s *Store) Drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*s.cfg.driftFactor) + 2*time.Millisecond
}

type result[T any] struct {
	node int
	val  T
}

// fan runs fn for each of nodes at once (each on a worker of s.workers),
// under one context that ends after timeout, and returns a channel that
// receives every result. The channel is buffered, so the workers never
// wait for a reader: a caller may stop reading once its outcome is
// decided. The requests are counted in s.wg; the caller must be inside
// enter.
func fan[T any](s *Store, ctx context.Context, timeout time.Duration, nodes []int, fn func(ctx context.Context, i int) T) <-chan result[T] { //nolint:revive // context-as-argument: s stands for the receiver (methods cannot have type parameters)
	return fanOut(s, ctx, timeout, nodes, fn).ch
}

// fanout is an operation's requests to its nodes, started by fanOut. Until
// the operation is tracked, each node's answer goes to ch; after, the
// nodes still working mark themselves done in the operation's flight.
type fanout[T any] struct {
	s    *Store
	ch   chan result[T]
	stop func() bool // detaches the requests from the caller's context

	mu    sync.Mutex
	fl    *flight // set by track
	names []string
	left  int // nodes of fl still working
}

// fanOut is fan, for an operation that may return before every node
// answered and be tracked (see track). A cancellation of ctx ends the
// requests only until track: once the operation has returned, the nodes
// still working go on to their answer (or the timeout, or ctx's deadline),
// whatever the caller does with ctx, so that its flight ends when they
// have answered, not when the caller gave up waiting (a Locker cancels its
// attempt's context as soon as Acquire returns).
func fanOut[T any](s *Store, ctx context.Context, timeout time.Duration, nodes []int, fn func(ctx context.Context, i int) T) *fanout[T] { //nolint:revive // context-as-argument: s stands for the receiver (methods cannot have type parameters)
	f := &fanout[T]{s: s, ch: make(chan result[T], len(nodes))}
	if len(nodes) == 0 {
		return f
	}
	// The caller's deadline still bounds the requests: valkey-go's direct
	// round trip watches a deadline, not a cancellation.
	dl := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	nctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl)
	f.stop = context.AfterFunc(ctx, cancel)
	var left atomic.Int32
	left.Store(int32(len(nodes)))
	finish := func() {
		if left.Add(-1) == 0 {
			f.stop()
			cancel()
		}
	}
	s.wg.Add(len(nodes))
	for _, i := range nodes {
		s.workers.run(func() {
			defer s.wg.Done()
			f.answer(i, fn(nctx, i))
			finish()
		})
	}
	return f
}

// answer delivers node i's answer: on ch, or, once the operation is
// tracked, by marking the node done in its flight; the last node of the
// flight ends it.
func (f *fanout[T]) answer(i int, v T) {
	f.mu.Lock()
	fl := f.fl
	if fl == nil {
		f.ch <- result[T]{i, v}
		f.mu.Unlock()
		return
	}
	close(fl.done[i])
	f.left--
	last := f.left == 0
	f.mu.Unlock()
	if last {
		f.s.land(fl, f.names)
	}
}

func nodeErr(op string, node int, err error) error {
	return &store.StoreError{Op: op, Node: node, Err: err}
}

var _ store.LockDelayer = (*Store)(nil)

// SupportsLockDelay implements [store.LockDelayer]: true when every node
// supports it, since each node ends its hold by its own clock.
func (s *Store) SupportsLockDelay() bool {
	for _, n := range s.nodes {
		if !store.SupportsLockDelay(n) {
			return false
		}
	}
	return true
}
