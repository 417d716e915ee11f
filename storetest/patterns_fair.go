package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

func init() { register("Fair", store.ModeFair, testFair) }

// testFair checks the fair (FIFO) lock on the store and through a Locker.
func testFair(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"ArrivalOrder", fairArrivalOrder},
		{"ReleaseHandsToHead", fairHandsToHead},
		{"OneReleaseWakesOneWaiter", fairOneWakeUp},
		{"DeadWaiterPruned", fairDeadWaiterPruned},
		{"KilledHeadSkipped", fairKilledHead},
		{"UnclaimedHandoffPassesOn", fairUnclaimedHandoff},
		{"ClaimedHandoffKeepsTTL", fairClaimedHandoff},
		{"WaiterLeaves", fairWaiterLeaves},
		{"ExpiredHolderHandsOver", fairExpiredHolder},
		{"Inspector", fairInspector},
		{"LockerWokenOnRelease", func(t *testing.T, s store.Store) { fairLockerWoken(t, s, peerStore(t, h, s)) }},
		{"LockerFIFOWithDeadWaiter", fairLockerFIFO},
		{"LockerWaitLongerThanQueueTTL", fairLockerLongWait},
		{"LockerMutualExclusion", fairLockerExclusion},
		{"LockerContextEnds", fairLockerContextEnds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parallel(t)
			tt.fn(t, h.New(t))
		})
	}
}

func fairReq(name string, ttl time.Duration) store.Request {
	return store.Request{Name: name, Token: newToken(), TTL: ttl, Mode: store.ModeFair}
}

// fairWaiter returns a fair request that queues with queueTTL.
func fairWaiter(name string, queueTTL time.Duration) store.Request {
	return queued(fairReq(name, longTTL), queueTTL)
}

// mustQueue acquires a queued req and fails t unless it was refused at
// position pos.
func mustQueue(t *testing.T, s store.Store, req store.Request, pos int) {
	t.Helper()
	g := mustRefuse(t, s, req)
	if g.Position != pos {
		t.Errorf("queued Acquire position = %d, want %d", g.Position, pos)
	}
}

// fairArrivalOrder checks that queued waiters get the lock strictly in
// arrival order, each with a new fence, and that a caller that does not
// queue never gets ahead of them.
func fairArrivalOrder(t *testing.T, s store.Store) {
	name := lockName(t)
	holder := fairReq(name, longTTL)
	last := mustAcquire(t, s, holder).Fence
	var ws []store.Request
	for i := range 4 {
		w := fairWaiter(name, longTTL)
		mustQueue(t, s, w, i)
		ws = append(ws, w)
	}
	mustQueue(t, s, ws[1], 1) // refreshing keeps the place
	newcomer := fairReq(name, longTTL)
	if g := mustRefuse(t, s, newcomer); g.Position != len(ws) {
		t.Errorf("non-queued Acquire position = %d, want %d (behind every waiter)", g.Position, len(ws))
	}
	mustRelease(t, s, holder)
	for i, w := range ws {
		g := mustAcquire(t, s, w)
		if g.Fence <= last {
			t.Errorf("waiter %d fence %d, want > %d", i, g.Fence, last)
		}
		last = g.Fence
		mustRefuse(t, s, newcomer)
		for j, later := range ws[i+1:] {
			mustQueue(t, s, later, j)
		}
		mustRelease(t, s, w)
	}
	mustAcquire(t, s, newcomer)
	mustRelease(t, s, newcomer)
}

// fairHandsToHead checks that the release itself hands the lock to the
// head waiter: the waiter holds it before asking again, and nobody else
// can take it in between.
func fairHandsToHead(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	holder := fairReq(name, longTTL)
	gh := mustAcquire(t, s, holder)
	w := fairWaiter(name, longTTL)
	mustQueue(t, s, w, 0)
	mustRelease(t, s, holder)
	// Nobody can take it: it is already the waiter's.
	mustRefuse(t, s, fairReq(name, longTTL))
	if err := s.Extend(ctx, []store.Request{w})[0]; err != nil {
		t.Errorf("Extend by the head waiter after the release = %v, want nil (it holds the lock)", err)
	}
	if g := mustAcquire(t, s, w); g.Fence <= gh.Fence {
		t.Errorf("handed-over fence %d, want > %d", g.Fence, gh.Fence)
	}
	mustRelease(t, s, w)
}

// fairOneWakeUp checks, on a store implementing store.GrantWatcher (and not
// refusing it for the fair lock), that a release delivers the grant to the
// head waiter alone.
func fairOneWakeUp(t *testing.T, s store.Store) {
	gw, ok := s.(store.GrantWatcher)
	if !ok {
		t.Skip("store does not implement store.GrantWatcher")
	}
	ctx := testContext(t)
	name := lockName(t)
	holder := fairReq(name, longTTL)
	gh := mustAcquire(t, s, holder)
	ws := []store.Request{fairWaiter(name, longTTL), fairWaiter(name, longTTL), fairWaiter(name, longTTL)}
	chans := make([]<-chan store.Grant, len(ws))
	for i, w := range ws {
		ch, stop, err := gw.WatchGrant(ctx, w)
		if errors.Is(err, store.ErrNotSupported) {
			t.Skipf("WatchGrant(mode fair) = %v", err)
		}
		if err != nil {
			t.Fatalf("WatchGrant = %v", err)
		}
		t.Cleanup(stop)
		chans[i] = ch
		mustQueue(t, s, w, i)
	}
	last := gh.Fence
	released := time.Now()
	mustRelease(t, s, holder)
	for i, w := range ws {
		timer := time.NewTimer(waitTimeout)
		select {
		case g := <-chans[i]:
			timer.Stop()
			if !g.Acquired || g.Fence <= last {
				t.Errorf("grant delivered to waiter %d = %+v, want Acquired with fence > %d", i, g, last)
			}
			t.Logf("waiter %d: grant delivered %v after the release call", i, time.Since(released))
			last = g.Fence
			if ga := mustAcquire(t, s, w); ga.Fence != g.Fence {
				t.Errorf("Acquire by waiter %d after the delivery fence %d, want the delivered %d", i, ga.Fence, g.Fence)
			}
		case <-timer.C:
			t.Fatalf("no grant delivered to head waiter %d within %v", i, waitTimeout)
		}
		for j := range ws {
			select {
			case g := <-chans[j]:
				t.Errorf("waiter %d got a grant %+v while waiter %d holds; want one delivery per release", j, g, i)
			default:
			}
		}
		released = time.Now()
		mustRelease(t, s, w)
	}
}

// fairDeadWaiterPruned checks that a waiter that stops refreshing its place
// is dropped after its queue TTL, judged by the store, so that it neither
// delays the others nor gets the lock.
func fairDeadWaiterPruned(t *testing.T, s store.Store) {
	name := lockName(t)
	holder := fairReq(name, longTTL)
	mustAcquire(t, s, holder)
	const queueTTL = 200 * time.Millisecond
	dead := fairWaiter(name, queueTTL)
	mustQueue(t, s, dead, 0)
	queued := time.Now() // the store set the entry's deadline before this
	live := fairWaiter(name, longTTL)
	mustQueue(t, s, live, 1)
	sleepUntil(queued.Add(queueTTL + 2*clockSlack))
	// The dead waiter is gone. A store whose reaper runs in the process
	// (ZooKeeper) may drop it a little late on a busy machine: poll.
	for deadline := time.Now().Add(10 * time.Second); ; {
		g := mustRefuse(t, s, live)
		if g.Position == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued Acquire position = %d 10s after the dead waiter's queue TTL ran out, want 0", g.Position)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustRelease(t, s, holder)
	mustAcquire(t, s, live)
	if err := s.Release(testContext(t), dead); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release by the pruned waiter = %v, want ErrNotHeld (neither holding nor queued)", err)
	}
	mustRelease(t, s, live)
}

// fairKilledHead checks that a head waiter that died after the lock was
// handed to it delays the next live waiter only until the dead waiter's
// lease runs out, and the order of the live waiters is kept.
func fairKilledHead(t *testing.T, s store.Store) {
	name := lockName(t)
	holder := fairReq(name, longTTL)
	mustAcquire(t, s, holder)
	const ttl = 200 * time.Millisecond
	dead := queued(fairReq(name, ttl), ttl)
	mustQueue(t, s, dead, 0)
	next, after := fairWaiter(name, longTTL), fairWaiter(name, longTTL)
	mustQueue(t, s, next, 1)
	mustQueue(t, s, after, 2)
	released := time.Now()
	mustRelease(t, s, holder) // hands the lock to the dead waiter
	g, at := acquireWhenFree(t, s, next)
	if d := at.Sub(released); d < ttl-clockSlack {
		t.Logf("next waiter served %v after the release (the dead head was pruned before the handoff)", d)
	}
	mustQueue(t, s, after, 0)
	mustRelease(t, s, next)
	if g2 := mustAcquire(t, s, after); g2.Fence <= g.Fence {
		t.Errorf("fence of the waiter after %d, want > %d", g2.Fence, g.Fence)
	}
	mustRelease(t, s, after)
}

// fairUnclaimedHandoff checks that a lock handed to a head waiter that never
// claims it (it died after queueing, or nobody holds its token) keeps the
// name from the next waiter no longer than the dead waiter's queue TTL, not
// for the whole TTL it asked to hold for: the grant's claim window.
func fairUnclaimedHandoff(t *testing.T, s store.Store) {
	name := lockName(t)
	holder := fairReq(name, longTTL)
	gh := mustAcquire(t, s, holder)
	const queueTTL = 300 * time.Millisecond
	dead := fairWaiter(name, queueTTL) // asks to hold for longTTL
	mustQueue(t, s, dead, 0)
	next := fairWaiter(name, longTTL)
	mustQueue(t, s, next, 1)
	released := time.Now()
	mustRelease(t, s, holder) // hands the lock to the dead waiter
	// acquireWhenFree gives up after waitTimeout, a third of longTTL.
	g, at := acquireWhenFree(t, s, next)
	t.Logf("next waiter served %v after the release to a waiter that never claimed", at.Sub(released))
	if g.Fence <= gh.Fence {
		t.Errorf("fence of the next waiter %d, want > %d", g.Fence, gh.Fence)
	}
	if err := s.Extend(testContext(t), []store.Request{dead})[0]; !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Extend by the waiter that never claimed = %v, want ErrNotHeld", err)
	}
	mustRelease(t, s, next)
}

// fairClaimedHandoff checks that a head waiter whose queue TTL is shorter
// than its lease TTL claims the lock handed to it by its next Acquire, which
// holds it for the whole TTL.
func fairClaimedHandoff(t *testing.T, s store.Store) {
	name := lockName(t)
	holder := fairReq(name, longTTL)
	gh := mustAcquire(t, s, holder)
	const queueTTL = 2 * time.Second
	w := fairWaiter(name, queueTTL) // asks to hold for longTTL
	mustQueue(t, s, w, 0)
	next := fairWaiter(name, longTTL)
	mustQueue(t, s, next, 1)
	mustRelease(t, s, holder)
	g := mustAcquire(t, s, w) // the claim
	if g.Fence <= gh.Fence {
		t.Errorf("claimed fence %d, want > %d", g.Fence, gh.Fence)
	}
	if g2 := mustAcquire(t, s, w); g2.Fence != g.Fence {
		t.Errorf("fence of a repeated claim %d, want %d (the same grant)", g2.Fence, g.Fence)
	}
	if r := mustRefuse(t, s, next); r.RetryAfter != 0 && r.RetryAfter <= queueTTL {
		t.Errorf("next waiter RetryAfter = %v after the claim, want > %v (the claimed TTL %v)", r.RetryAfter, queueTTL, longTTL)
	}
	mustRelease(t, s, w)
	mustAcquire(t, s, next)
	mustRelease(t, s, next)
}

// fairWaiterLeaves checks that Release by a queued token drops its place.
func fairWaiterLeaves(t *testing.T, s store.Store) {
	name := lockName(t)
	holder := fairReq(name, longTTL)
	mustAcquire(t, s, holder)
	w1, w2 := fairWaiter(name, longTTL), fairWaiter(name, longTTL)
	mustQueue(t, s, w1, 0)
	mustQueue(t, s, w2, 1)
	mustRelease(t, s, w1)
	mustNotHold(t, s, w1, "of a waiter that left")
	mustQueue(t, s, w2, 0)
	mustRelease(t, s, holder)
	mustAcquire(t, s, w2)
	mustRelease(t, s, w2)
}

// fairExpiredHolder checks that when the holder's lease runs out without a
// release, the lock goes to the head waiter, not before the TTL.
func fairExpiredHolder(t *testing.T, s store.Store) {
	name := lockName(t)
	const ttl = 200 * time.Millisecond
	start := time.Now()
	holder := fairReq(name, ttl)
	gh := mustAcquire(t, s, holder)
	w := fairWaiter(name, longTTL)
	if g := mustRefuse(t, s, w); g.RetryAfter <= 0 || g.RetryAfter > ttl {
		t.Errorf("head waiter RetryAfter = %v, want in (0, %v]", g.RetryAfter, ttl)
	}
	mustQueue(t, s, fairWaiter(name, longTTL), 1)
	g, at := acquireWhenFree(t, s, w)
	if d := at.Sub(start); d < ttl-clockSlack {
		t.Errorf("head waiter served %v after a holder with TTL %v; want not before", d, ttl)
	}
	if g.Fence <= gh.Fence {
		t.Errorf("fence after expiry %d, want > %d", g.Fence, gh.Fence)
	}
	mustNotHold(t, s, holder, "of an expired holder")
	mustRelease(t, s, w)
}

// fairInspector checks that State reports the queue length.
func fairInspector(t *testing.T, s store.Store) {
	in, ok := s.(store.Inspector)
	if !ok {
		t.Skip("store does not implement store.Inspector")
	}
	ctx := testContext(t)
	name := lockName(t)
	holder := fairReq(name, longTTL)
	gh := mustAcquire(t, s, holder)
	ws := []store.Request{fairWaiter(name, longTTL), fairWaiter(name, longTTL), fairWaiter(name, longTTL)}
	for i, w := range ws {
		mustQueue(t, s, w, i)
	}
	st, err := in.State(ctx, name)
	if err != nil {
		t.Fatalf("State(%q) = %v", name, err)
	}
	if st.Mode != store.ModeFair || st.Holders != 1 || st.Queue != 3 || st.Fence != gh.Fence || st.TTL <= 0 {
		t.Errorf("State(%q) = %+v, want Mode fair, 1 holder, Queue 3, Fence %d", name, st, gh.Fence)
	}
	checkListed(t, in, st)
	mustRelease(t, s, holder)
	if st, _ := in.State(ctx, name); st.Queue != 2 || st.Holders != 1 {
		t.Errorf("State(%q) after a handoff = %+v, want 1 holder and Queue 2", name, st)
	}
	for _, w := range ws {
		mustRelease(t, s, w)
	}
	if st, _ := in.State(ctx, name); st.Queue != 0 || st.Holders != 0 {
		t.Errorf("State(%q) after every release = %+v, want no holder and no queue", name, st)
	}
}

// fairLockerFIFO queues waiters on their own Lockers in a known order, with
// a dead waiter (a queue entry nobody refreshes, as of a killed process)
// among them, and checks that the live ones are served in arrival order.
func fairLockerFIFO(t *testing.T, s store.Store) {
	const waiters = 6
	ctx := testContext(t)
	name := lockName(t)
	const deadTTL = 300 * time.Millisecond
	first, err := newLocker(t, s, dlock.WithTTL(longTTL)).Fair(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock = %v", err)
	}
	var (
		mu     sync.Mutex
		order  []int
		inside atomic.Int32
		wg     sync.WaitGroup
		e      errs
	)
	for i := range waiters {
		if i == waiters/2 {
			dead := queued(fairReq(name, deadTTL), deadTTL)
			mustQueue(t, s, dead, i)
		}
		queuedCh := make(chan struct{})
		var once sync.Once
		l := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithQueueTTL(2*time.Second),
			dlock.WithQueuePosition(func(int) { once.Do(func() { close(queuedCh) }) }))
		wg.Go(func() {
			lease, err := l.Fair(name).Lock(ctx)
			if err != nil {
				e.add(fmt.Errorf("waiter %d: Lock = %v", i, err))
				once.Do(func() { close(queuedCh) })
				return
			}
			if inside.Add(1) != 1 {
				e.add(fmt.Errorf("waiter %d inside with another holder", i))
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			runtime.Gosched()
			inside.Add(-1)
			if err := lease.Release(ctx); err != nil {
				e.add(fmt.Errorf("waiter %d: Release = %v", i, err))
			}
		})
		if !waitClosed(queuedCh) {
			t.Fatalf("waiter %d not queued within %v", i, waitTimeout)
		}
	}
	start := time.Now()
	first.Release(ctx)
	wg.Wait()
	e.report(t)
	want := make([]int, waiters)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(order, want) {
		t.Errorf("live waiters served in order %v, want %v (arrival order)", order, want)
	}
	t.Logf("%d waiters and a dead one served in %v", waiters, time.Since(start))
}

// fairLockerExclusion runs Lock from goroutines on several Lockers and
// checks mutual exclusion and increasing fences.
func fairLockerExclusion(t *testing.T, s store.Store) {
	const lockers, perLocker, rounds = 3, 3, 6
	ctx := testContext(t)
	name := lockName(t)
	var (
		inside    atomic.Int32
		lastFence atomic.Int64
		overlaps  atomic.Int64
		wg        sync.WaitGroup
		e         errs
	)
	for range lockers {
		f := newLocker(t, s, dlock.WithTTL(longTTL)).Fair(name)
		for range perLocker {
			wg.Go(func() {
				for range rounds {
					lease, err := f.Lock(ctx)
					if err != nil {
						e.add(fmt.Errorf("Lock(%q) = %v", name, err))
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					if last := lastFence.Load(); lease.Fence() <= last {
						e.add(fmt.Errorf("fence %d after %d; want strictly increasing", lease.Fence(), last))
					}
					lastFence.Store(lease.Fence())
					runtime.Gosched()
					inside.Add(-1)
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
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d critical sections overlapped, want 0", n)
	}
}

// fairLockerContextEnds checks that a waiter that gives up leaves the queue,
// so the lock goes to the waiter behind it.
func fairLockerContextEnds(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	l := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithQueueTTL(longTTL))
	holder, err := l.Fair(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock = %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	queuedCh := make(chan struct{})
	var once sync.Once
	quitter := l.Fair(name, dlock.WithQueuePosition(func(int) { once.Do(func() { close(queuedCh) }) }))
	done := make(chan error, 1)
	go func() {
		_, err := quitter.Lock(wctx)
		done <- err
	}()
	if !waitClosed(queuedCh) {
		t.Fatalf("waiter not queued within %v", waitTimeout)
	}
	behind := fairWaiter(name, longTTL)
	mustQueue(t, s, behind, 1)
	cancel()
	err = <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("Lock after its ctx ended = %v, want an error matching context.Canceled and ErrLocked", err)
	}
	mustQueue(t, s, behind, 0)
	holder.Release(ctx)
	mustAcquire(t, s, behind)
	mustRelease(t, s, behind)
}

// fairLockerWoken checks that a queued Lock is handed the lock and woken by
// the store when the holder releases through another store.
func fairLockerWoken(t *testing.T, s, peer store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	holder := fairReq(name, longTTL)
	gh := mustAcquire(t, peer, holder)
	queuedCh := make(chan struct{})
	var once sync.Once
	lease := checkWoken(t, s, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.Fair(name, dlock.WithQueuePosition(func(int) { once.Do(func() { close(queuedCh) }) })).Lock(ctx)
	}, func() {
		if !waitClosed(queuedCh) {
			t.Fatalf("waiter not queued within %v", waitTimeout)
		}
	}, func() error { return peer.Release(ctx, holder) })
	if lease.Fence() <= gh.Fence {
		t.Errorf("handed-over fence %d, want > %d", lease.Fence(), gh.Fence)
	}
	lease.Release(ctx)
}

// fairLockerLongWait checks that waiters keep their places while they wait
// many queue TTLs (they refresh them), and are served in arrival order.
func fairLockerLongWait(t *testing.T, s store.Store) {
	// The queue TTL is short against the wait, not against a stall of the
	// test process: a waiter refreshes its place every queueTTL/3, and under
	// -race on a loaded machine a refresh can come 200ms late, which with
	// 300ms dropped the place (order [1 2 0] seen on the memory store).
	const waiters, queueTTL = 3, time.Second
	ctx := testContext(t)
	name := lockName(t)
	holder := fairReq(name, longTTL)
	mustAcquire(t, s, holder)
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
		e     errs
	)
	for i := range waiters {
		queuedCh := make(chan struct{})
		var once sync.Once
		l := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithQueueTTL(queueTTL),
			dlock.WithQueuePosition(func(int) { once.Do(func() { close(queuedCh) }) }))
		wg.Go(func() {
			lease, err := l.Fair(name).Lock(ctx)
			if err != nil {
				e.add(fmt.Errorf("waiter %d: Lock = %v", i, err))
				once.Do(func() { close(queuedCh) })
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			lease.Release(ctx)
		})
		if !waitClosed(queuedCh) {
			t.Fatalf("waiter %d not queued within %v", i, waitTimeout)
		}
	}
	sleepUntil(time.Now().Add(3 * queueTTL)) // the waiters outlive their queue TTL several times
	if g := mustRefuse(t, s, fairWaiter(name, longTTL)); g.Position != waiters {
		t.Errorf("a newcomer's position after the wait = %d, want %d (every waiter kept its place)", g.Position, waiters)
	}
	mustRelease(t, s, holder)
	wg.Wait()
	e.report(t)
	if want := []int{0, 1, 2}; !slices.Equal(order, want) {
		t.Errorf("waiters served in order %v, want %v", order, want)
	}
}
