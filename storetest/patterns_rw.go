package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

func init() { register("RWMutex", store.ModeRead, testRW) }

// testRW checks the read-write lock (ModeRead and ModeWrite) on the store
// and through a Locker.
func testRW(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Exclusion", rwExclusion},
		{"Fences", rwFences},
		{"WaitingWriterBlocksReaders", rwWriterIntent},
		{"DeadWriterIntentPruned", rwDeadIntent},
		{"CrashedReaderBlocksOnlyUntilItsTTL", rwCrashedReader},
		{"Downgrade", rwDowngrade},
		{"UpgradeRefused", rwUpgrade},
		{"ReadersTokenCannotWrite", rwReadersToken},
		{"Inspector", rwInspector},
		{"LockerExclusion", rwLockerExclusion},
		{"LockerWriterNotStarved", rwLockerWriterNotStarved},
		{"LockerWokenOnRelease", func(t *testing.T, s store.Store) { rwLockerWoken(t, s, peerStore(t, h, s)) }},
		{"LockerDowngradeAndUpgrade", rwLockerDowngrade},
		{"LockerWriterWaitsLongerThanQueueTTL", rwLockerLongWait},
		{"LockerContextEnds", rwLockerContextEnds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parallel(t)
			tt.fn(t, h.New(t))
		})
	}
}

func readReq(name string, ttl time.Duration) store.Request {
	return store.Request{Name: name, Token: newToken(), TTL: ttl, Mode: store.ModeRead}
}

func writeReq(name string, ttl time.Duration) store.Request {
	return store.Request{Name: name, Token: newToken(), TTL: ttl, Mode: store.ModeWrite}
}

// queued returns req as a waiting writer whose intent lives for queueTTL.
func queued(req store.Request, queueTTL time.Duration) store.Request {
	req.Queue, req.QueueTTL = true, queueTTL
	return req
}

// rwState tracks who is inside a read-write lock and counts violations.
type rwState struct {
	mu         sync.Mutex
	readers    int
	writers    int
	violations int
	peak       int // most readers inside together
}

func (st *rwState) enter(write bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.writers > 0 || (write && st.readers > 0) {
		st.violations++
	}
	if write {
		st.writers++
	} else {
		st.readers++
		st.peak = max(st.peak, st.readers)
	}
}

func (st *rwState) leave(write bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if write {
		st.writers--
	} else {
		st.readers--
	}
}

// rwExclusion runs readers and waiting writers on the store from many
// goroutines and checks that a writer is never inside with anyone else,
// and that writers' fences increase and readers see the last writer's.
func rwExclusion(t *testing.T, s store.Store) {
	const readers, writers, rounds = 8, 4, 12
	ctx := testContext(t)
	name := lockName(t)
	var (
		st        rwState
		lastWrite atomic.Int64 // fence of the last write grant, set inside
		wg        sync.WaitGroup
		e         errs
	)
	worker := func(write bool) {
		wake, stop, err := s.Watch(ctx, name, map[bool]store.Mode{false: store.ModeRead, true: store.ModeWrite}[write])
		if err != nil {
			e.add(fmt.Errorf("Watch(%q) = %v", name, err))
			return
		}
		defer stop()
		for range rounds {
			req := readReq(name, longTTL)
			if write {
				req = queued(writeReq(name, longTTL), longTTL)
			}
			g, err := acquireWatching(ctx, s, req, wake)
			if err != nil {
				e.add(err)
				return
			}
			st.enter(write)
			if write {
				if last := lastWrite.Load(); g.Fence <= last {
					e.add(fmt.Errorf("write fence %d after write fence %d; want strictly increasing", g.Fence, last))
				}
				lastWrite.Store(g.Fence)
			} else if last := lastWrite.Load(); g.Fence < last {
				e.add(fmt.Errorf("read fence %d below the last write fence %d", g.Fence, last))
			}
			runtime.Gosched()
			st.leave(write)
			if err := s.Release(ctx, req); err != nil {
				e.add(fmt.Errorf("Release(%q, mode %v) = %v", name, req.Mode, err))
				return
			}
		}
	}
	for i := range readers + writers {
		wg.Go(func() { worker(i < writers) })
	}
	wg.Wait()
	e.report(t)
	if st.violations != 0 {
		t.Errorf("%d times a writer was inside with someone else, want 0", st.violations)
	}
	t.Logf("peak readers inside together: %d", st.peak)
}

// rwFences checks that writers get new fences and readers the current
// one, and that every grant has a fence.
func rwFences(t *testing.T, s store.Store) {
	name := lockName(t)
	r0 := readReq(name, longTTL)
	g0 := mustAcquire(t, s, r0) // a reader before any writer still gets a fence
	mustRelease(t, s, r0)
	last := g0.Fence
	for i := range 3 {
		w := writeReq(name, longTTL)
		gw := mustAcquire(t, s, w)
		if gw.Fence <= last {
			t.Errorf("write %d fence %d, want > %d", i, gw.Fence, last)
		}
		last = gw.Fence
		mustRelease(t, s, w)
		r1, r2 := readReq(name, longTTL), readReq(name, longTTL)
		g1, g2 := mustAcquire(t, s, r1), mustAcquire(t, s, r2)
		if g1.Fence != gw.Fence || g2.Fence != gw.Fence {
			t.Errorf("reader fences %d, %d after write fence %d; want the current fence", g1.Fence, g2.Fence, gw.Fence)
		}
		mustRelease(t, s, r1)
		mustRelease(t, s, r2)
	}
}

// rwWriterIntent checks that a waiting writer keeps new readers out, takes
// the lock when the readers are gone, and that readers enter after it.
func rwWriterIntent(t *testing.T, s store.Store) {
	name := lockName(t)
	r1 := readReq(name, longTTL)
	mustAcquire(t, s, r1)
	r2 := readReq(name, longTTL)
	mustAcquire(t, s, r2) // readers share
	w := queued(writeReq(name, longTTL), longTTL)
	if g := mustRefuse(t, s, w); g.RetryAfter <= 0 {
		t.Errorf("refused writer RetryAfter = %v, want > 0", g.RetryAfter)
	}
	mustRefuse(t, s, writeReq(name, longTTL)) // a writer that does not wait gets no place ahead
	r3 := readReq(name, longTTL)
	mustRefuse(t, s, r3) // the waiting writer keeps new readers out
	mustRelease(t, s, r1)
	mustRefuse(t, s, w)
	mustRelease(t, s, r2)
	mustRefuse(t, s, r3) // not even now: the writer is first
	gw := mustAcquire(t, s, w)
	mustRefuse(t, s, r3)
	mustRelease(t, s, w)
	if g := mustAcquire(t, s, r3); g.Fence != gw.Fence {
		t.Errorf("reader after the writer fence %d, want %d", g.Fence, gw.Fence)
	}
	mustRelease(t, s, r3)
}

// rwDeadIntent checks that the intent of a writer that stopped waiting
// (and never withdrew it) stops blocking readers after its queue TTL, and
// that a withdrawn intent stops blocking them at once.
func rwDeadIntent(t *testing.T, s store.Store) {
	name := lockName(t)
	r1 := readReq(name, longTTL)
	mustAcquire(t, s, r1)
	const queueTTL = 200 * time.Millisecond
	start := time.Now()
	dead := queued(writeReq(name, longTTL), queueTTL)
	mustRefuse(t, s, dead)
	r2 := readReq(name, longTTL)
	g := mustRefuse(t, s, r2)
	if g.RetryAfter > longTTL {
		t.Errorf("reader refused by an intent RetryAfter = %v, want at most the holders' TTL", g.RetryAfter)
	}
	_, at := acquireWhenFree(t, s, r2)
	if d := at.Sub(start); d < queueTTL-clockSlack {
		t.Errorf("reader admitted %v after a writer intent with queue TTL %v; want not before", d, queueTTL)
	}
	mustRelease(t, s, r2)

	gone := queued(writeReq(name, longTTL), longTTL)
	mustRefuse(t, s, gone)
	r3 := readReq(name, longTTL)
	mustRefuse(t, s, r3)
	mustRelease(t, s, gone) // withdrawing the intent
	mustAcquire(t, s, r3)
	mustRelease(t, s, r3)
	mustRelease(t, s, r1)
}

// rwCrashedReader checks that a reader that never releases blocks a writer
// only until the reader's own TTL, while other readers come and go.
func rwCrashedReader(t *testing.T, s store.Store) {
	name := lockName(t)
	const ttl = 200 * time.Millisecond
	start := time.Now()
	crashed := readReq(name, ttl)
	mustAcquire(t, s, crashed)
	other := readReq(name, longTTL)
	mustAcquire(t, s, other)
	w := queued(writeReq(name, longTTL), longTTL)
	mustRefuse(t, s, w)
	mustRelease(t, s, other)
	_, at := acquireWhenFree(t, s, w)
	if d := at.Sub(start); d < ttl-clockSlack {
		t.Errorf("writer admitted %v after a reader with TTL %v; want not before", d, ttl)
	}
	mustNotHold(t, s, crashed, "of an expired reader")
	mustRelease(t, s, w)
}

// rwDowngrade checks that a reader whose Owner is the holding writer's
// token is let in beside it at the writer's fence, and that releasing the
// writer then lets readers in but keeps writers out.
func rwDowngrade(t *testing.T, s store.Store) {
	name := lockName(t)
	w := writeReq(name, longTTL)
	gw := mustAcquire(t, s, w)
	r := readReq(name, longTTL)
	r.Owner = w.Token
	if g := mustAcquire(t, s, r); g.Fence != gw.Fence {
		t.Errorf("downgrading reader fence %d, want the writer's %d", g.Fence, gw.Fence)
	}
	stranger := readReq(name, longTTL)
	stranger.Owner = newToken()
	mustRefuse(t, s, stranger) // an Owner that is not the writer does not help
	mustRelease(t, s, w)
	g := mustAcquire(t, s, stranger)
	if g.Fence != gw.Fence {
		t.Errorf("reader after the downgrade fence %d, want %d", g.Fence, gw.Fence)
	}
	mustRefuse(t, s, writeReq(name, longTTL))
	mustRelease(t, s, r)
	mustRelease(t, s, stranger)
	next := writeReq(name, longTTL)
	if g := mustAcquire(t, s, next); g.Fence <= gw.Fence {
		t.Errorf("writer after the downgrade fence %d, want > %d", g.Fence, gw.Fence)
	}
	mustRelease(t, s, next)
}

// rwUpgrade checks that a writer naming a reader's token as its Owner is
// refused with ErrUpgrade instead of waiting for itself.
func rwUpgrade(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	r := readReq(name, longTTL)
	mustAcquire(t, s, r)
	w := queued(writeReq(name, longTTL), longTTL)
	w.Owner = r.Token
	g, err := s.Acquire(ctx, w)
	if !errors.Is(err, store.ErrUpgrade) || g.Acquired {
		t.Errorf("Acquire(write, Owner = a reader's token) = %+v, %v; want ErrUpgrade", g, err)
	}
	r2 := readReq(name, longTTL)
	mustAcquire(t, s, r2) // the refused upgrade left no intent behind
	mustRelease(t, s, r2)
	mustRelease(t, s, r)
}

// rwReadersToken checks that a write request carrying a reader's own token
// is refused with ErrUpgrade while another reader holds, as a writer
// naming that reader as its Owner is: it is not the repeat of a write, and
// granting it would give a writer beside a reader.
func rwReadersToken(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	r1, r2 := readReq(name, longTTL), readReq(name, longTTL)
	mustAcquire(t, s, r1)
	mustAcquire(t, s, r2)
	w := writeReq(name, longTTL)
	w.Token, w.Owner = r1.Token, r1.Token
	g, err := s.Acquire(ctx, w)
	if g.Acquired || !errors.Is(err, store.ErrUpgrade) {
		t.Errorf("Acquire(write, Token = a reader's token) beside another reader = %+v, %v; want ErrUpgrade", g, err)
	}
	if g, err := s.Acquire(ctx, writeReq(name, longTTL)); err != nil || g.Acquired {
		t.Errorf("Acquire(write) while two readers hold = %+v, %v; want refused", g, err)
	}
	mustRelease(t, s, r2)
	mustRelease(t, s, r1)
}

// rwInspector checks that State counts readers and waiting writers.
func rwInspector(t *testing.T, s store.Store) {
	in, ok := s.(store.Inspector)
	if !ok {
		t.Skip("store does not implement store.Inspector")
	}
	ctx := testContext(t)
	name := lockName(t)
	r1, r2 := readReq(name, longTTL), readReq(name, longTTL)
	mustAcquire(t, s, r1)
	mustAcquire(t, s, r2)
	w := queued(writeReq(name, longTTL), longTTL)
	mustRefuse(t, s, w)
	st, err := in.State(ctx, name)
	if err != nil {
		t.Fatalf("State(%q) = %v", name, err)
	}
	if st.Mode != store.ModeRead || st.Holders != 2 || st.Queue != 1 || st.TTL <= 0 {
		t.Errorf("State(%q) with 2 readers and a waiting writer = %+v, want Mode read, 2 holders, Queue 1", name, st)
	}
	checkListed(t, in, st)
	mustRelease(t, s, r1)
	mustRelease(t, s, r2)
	gw := mustAcquire(t, s, w)
	st, err = in.State(ctx, name)
	if err != nil {
		t.Fatalf("State(%q) = %v", name, err)
	}
	if st.Mode != store.ModeWrite || st.Holders != 1 || st.Queue != 0 || st.Fence != gw.Fence {
		t.Errorf("State(%q) with a writer = %+v, want Mode write, 1 holder, no queue, Fence %d", name, st, gw.Fence)
	}
	mustRelease(t, s, w)
}

// rwLockerExclusion runs RLock and Lock from goroutines on several Lockers
// and checks the exclusion invariant.
func rwLockerExclusion(t *testing.T, s store.Store) {
	const lockers, readers, writers, rounds = 3, 3, 1, 6
	ctx := testContext(t)
	name := lockName(t)
	var (
		st rwState
		wg sync.WaitGroup
		e  errs
	)
	for range lockers {
		rw := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithBackoff(time.Millisecond, 20*time.Millisecond)).RWMutex(name)
		for i := range readers + writers {
			write := i < writers
			wg.Go(func() {
				for range rounds {
					var lease *dlock.Lease
					var err error
					if write {
						lease, err = rw.Lock(ctx)
					} else {
						lease, err = rw.RLock(ctx)
					}
					if err != nil {
						e.add(fmt.Errorf("lock(%q, write %v) = %v", name, write, err))
						return
					}
					st.enter(write)
					runtime.Gosched()
					st.leave(write)
					if err := lease.Release(ctx); err != nil {
						e.add(fmt.Errorf("Release = %v", err))
						return
					}
				}
			})
		}
	}
	wg.Wait()
	e.report(t)
	if st.violations != 0 {
		t.Errorf("%d times a writer was inside with someone else, want 0", st.violations)
	}
}

// rwLockerWriterNotStarved keeps the lock continuously read by overlapping
// readers and checks that a writer still gets in, after which the readers
// that queued behind it get in again.
func rwLockerWriterNotStarved(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	name := lockName(t)
	l := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithBackoff(time.Millisecond, 20*time.Millisecond))
	rw := l.RWMutex(name)
	first, err := rw.RLock(ctx)
	if err != nil {
		t.Fatalf("RLock = %v", err)
	}
	var (
		wg       sync.WaitGroup
		released atomic.Bool // the writer has released
		once     sync.Once
		resumed  = make(chan struct{}) // closed when a reader got in after that
	)
	// Two readers that hand the lock to each other: there is always one
	// inside, so without writer priority a writer would wait forever.
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				lease, err := rw.RLock(ctx)
				if err != nil {
					return
				}
				if released.Load() {
					once.Do(func() { close(resumed) })
				}
				runtime.Gosched()
				lease.Release(context.WithoutCancel(ctx))
			}
		})
	}
	first.Release(ctx)
	w, err := newLocker(t, s, dlock.WithTTL(longTTL)).RWMutex(name).Lock(ctx)
	if err != nil {
		cancel()
		wg.Wait()
		t.Fatalf("Lock while readers stream = %v", err)
	}
	released.Store(true)
	w.Release(ctx)
	ok := waitClosed(resumed)
	cancel()
	wg.Wait()
	if !ok {
		t.Errorf("no reader got in within %v after the writer released", waitTimeout)
	}
}

// rwLockerDowngrade checks Downgrade and the ErrUpgrade refusal through a
// Locker.
func rwLockerDowngrade(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	rw := newLocker(t, s, dlock.WithTTL(longTTL)).RWMutex(name)
	other := newLocker(t, s, dlock.WithTTL(longTTL)).RWMutex(name)
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock = %v", err)
	}
	if _, err := other.TryRLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("TryRLock while written = %v, want ErrLocked", err)
	}
	// A read inside the writer's own ctx is let in beside it.
	beside, err := rw.TryRLock(dlock.ContextWithLease(ctx, w))
	if err != nil {
		t.Fatalf("TryRLock with the write lease in ctx = %v, want a grant beside it", err)
	}
	beside.Release(ctx)
	r, err := rw.Downgrade(ctx, w)
	if err != nil {
		t.Fatalf("Downgrade = %v", err)
	}
	if r.Mode() != store.ModeRead || r.Fence() != w.Fence() {
		t.Errorf("downgraded lease mode %v fence %d, want read and %d", r.Mode(), r.Fence(), w.Fence())
	}
	if err := w.Err(); err != nil || !isClosed(w.Done()) {
		t.Errorf("write lease after Downgrade: Err %v, Done closed %v; want released", err, isClosed(w.Done()))
	}
	r2, err := other.TryRLock(ctx)
	if err != nil {
		t.Errorf("TryRLock after the downgrade = %v, want readers let in", err)
	} else {
		r2.Release(ctx)
	}
	if _, err := other.TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("TryLock after the downgrade = %v, want ErrLocked", err)
	}
	if _, err := rw.Downgrade(ctx, w); err == nil {
		t.Errorf("Downgrade of a released write lease = nil, want an error")
	}
	rctx := dlock.ContextWithLease(ctx, r)
	if _, err := rw.Lock(rctx); !errors.Is(err, store.ErrUpgrade) {
		t.Errorf("Lock with a read lease in ctx = %v, want ErrUpgrade", err)
	}
	if _, err := rw.TryLock(rctx); !errors.Is(err, store.ErrUpgrade) {
		t.Errorf("TryLock with a read lease in ctx = %v, want ErrUpgrade", err)
	}
	r.Release(ctx)
	w3, err := other.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after every release = %v", err)
	}
	if w3.Fence() <= w.Fence() {
		t.Errorf("next writer fence %d, want > %d", w3.Fence(), w.Fence())
	}
	w3.Release(ctx)
}

// rwLockerContextEnds checks that a writer that gives up withdraws its
// intent, so readers are not kept out by it.
func rwLockerContextEnds(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	rw := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithQueueTTL(longTTL)).RWMutex(name)
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatalf("RLock = %v", err)
	}
	spy := newSpy(s)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := newLocker(t, spy, dlock.WithTTL(longTTL), dlock.WithQueueTTL(longTTL)).RWMutex(name).Lock(wctx)
		done <- err
	}()
	spy.waitRefused(t)
	if _, err := rw.TryRLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("TryRLock while a writer waits = %v, want ErrLocked", err)
	}
	cancel()
	err = <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("Lock after its ctx ended = %v, want an error matching context.Canceled and ErrLocked", err)
	}
	r2, err := rw.TryRLock(ctx)
	if err != nil {
		t.Errorf("TryRLock after the writer gave up = %v, want a grant (intent withdrawn)", err)
	} else {
		r2.Release(ctx)
	}
	r.Release(ctx)
}

// rwLockerWoken checks that a waiting reader is woken by the store when the
// writer releases through another store, and a waiting writer when the last
// reader does.
func rwLockerWoken(t *testing.T, s, peer store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	w := writeReq(name, longTTL)
	mustAcquire(t, peer, w)
	spy := newSpy(s)
	r := checkWoken(t, spy, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.RWMutex(name).RLock(ctx)
	}, func() { spy.waitRefused(t) }, func() error { return peer.Release(ctx, w) })
	r.Release(ctx)

	reader := readReq(name, longTTL)
	mustAcquire(t, peer, reader)
	spy2 := newSpy(s)
	w2 := checkWoken(t, spy2, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.RWMutex(name).Lock(ctx)
	}, func() { spy2.waitRefused(t) }, func() error { return peer.Release(ctx, reader) })
	w2.Release(ctx)
}

// rwLockerLongWait checks that a waiting writer keeps its intent alive for
// as long as it waits, however short its queue TTL, so that readers stay
// out until it has had its turn.
func rwLockerLongWait(t *testing.T, s store.Store) {
	// Short against the wait, not against a stall of the test process (the
	// writer refreshes every queueTTL/3; see fairLockerLongWait).
	// 2s: a refresh delayed past a 1s queue TTL let a reader in once on
	// a loaded Redlock (five nodes, -race).
	const queueTTL = 2 * time.Second
	ctx := testContext(t)
	name := lockName(t)
	r := readReq(name, longTTL)
	mustAcquire(t, s, r)
	spy := newSpy(s)
	done := make(chan error, 1)
	go func() {
		w, err := newLocker(t, spy, dlock.WithTTL(longTTL), dlock.WithQueueTTL(queueTTL)).RWMutex(name).Lock(ctx)
		if err == nil {
			err = w.Release(ctx)
		}
		done <- err
	}()
	spy.waitRefused(t)
	sleepUntil(time.Now().Add(5 * queueTTL / 2))
	mustRefuse(t, s, readReq(name, longTTL)) // the writer's intent still keeps readers out
	mustRelease(t, s, r)
	if err := <-done; err != nil {
		t.Fatalf("waiting writer = %v", err)
	}
}
