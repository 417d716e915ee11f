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

func init() { register("Semaphore", store.ModeSemaphore, testSemaphore) }

// testSemaphore checks ModeSemaphore on the store and through a Locker.
func testSemaphore(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Limit", semaphoreLimit},
		{"NeverMoreThanN", semaphoreNeverMoreThanN},
		{"CrashedHolderPermitReturns", semaphoreCrashedHolder},
		{"LockerWokenOnRelease", func(t *testing.T, s store.Store) { semaphoreLockerWoken(t, s, peerStore(t, h, s)) }},
		{"BadLimit", semaphoreBadLimit},
		{"Inspector", semaphoreInspector},
		{"LockerNeverMoreThanN", semaphoreLockerNeverMoreThanN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parallel(t)
			tt.fn(t, h.New(t))
		})
	}
}

func semaphoreReq(name string, n int, ttl time.Duration) store.Request {
	return store.Request{Name: name, Token: newToken(), TTL: ttl, Mode: store.ModeSemaphore, Limit: n}
}

// semaphoreLimit checks that n permits are granted, each with its own
// increasing fence, that the next is refused until one is released, and
// that each permit is released by its own token only.
func semaphoreLimit(t *testing.T, s store.Store) {
	name := lockName(t)
	const n = 3
	var reqs []store.Request
	var last int64
	for range n {
		req := semaphoreReq(name, n, longTTL)
		g := mustAcquire(t, s, req)
		if g.Fence <= last {
			t.Errorf("permit fence %d after %d, want strictly increasing", g.Fence, last)
		}
		last = g.Fence
		if g2 := mustAcquire(t, s, req); g2.Fence != g.Fence {
			t.Errorf("repeated Acquire of a permit fence %d, want %d (idempotent)", g2.Fence, g.Fence)
		}
		reqs = append(reqs, req)
	}
	extra := semaphoreReq(name, n, longTTL)
	if g := mustRefuse(t, s, extra); g.RetryAfter <= 0 {
		t.Errorf("refusal with every permit taken RetryAfter = %v, want > 0", g.RetryAfter)
	}
	mustNotHold(t, s, extra, "of a refused token")
	mustRelease(t, s, reqs[1])
	mustNotHold(t, s, reqs[1], "of a released permit")
	if g := mustAcquire(t, s, extra); g.Fence <= last {
		t.Errorf("permit after a release fence %d, want > %d", g.Fence, last)
	}
	mustRefuse(t, s, semaphoreReq(name, n, longTTL))
	for _, req := range []store.Request{reqs[0], reqs[2], extra} {
		mustRelease(t, s, req)
	}
}

// semaphoreNeverMoreThanN runs many goroutines taking and giving back
// permits and checks that no more than n are ever inside.
func semaphoreNeverMoreThanN(t *testing.T, s store.Store) {
	const n, workers, rounds = 3, 12, 15
	ctx := testContext(t)
	name := lockName(t)
	var (
		inside, peak atomic.Int32
		over         atomic.Int64
		wg           sync.WaitGroup
		e            errs
	)
	for range workers {
		wg.Go(func() {
			wake, stop, err := s.Watch(ctx, name, store.ModeSemaphore)
			if err != nil {
				e.add(fmt.Errorf("Watch(%q) = %v", name, err))
				return
			}
			defer stop()
			for range rounds {
				req := semaphoreReq(name, n, longTTL)
				if _, err := acquireWatching(ctx, s, req, wake); err != nil {
					e.add(err)
					return
				}
				k := inside.Add(1)
				if k > n {
					over.Add(1)
				}
				for p := peak.Load(); k > p && !peak.CompareAndSwap(p, k); p = peak.Load() { //nolint:revive // empty-block: the CAS loop's work is in its condition
				}
				runtime.Gosched()
				inside.Add(-1)
				if err := s.Release(ctx, req); err != nil {
					e.add(fmt.Errorf("Release(%q) of a permit = %v", name, err))
					return
				}
			}
		})
	}
	wg.Wait()
	e.report(t)
	if k := over.Load(); k != 0 {
		t.Errorf("%d times more than %d holders were inside", k, n)
	}
	t.Logf("peak holders %d of %d", peak.Load(), n)
}

// semaphoreCrashedHolder checks that a permit that is never released comes
// back when its TTL runs out, and not before.
func semaphoreCrashedHolder(t *testing.T, s store.Store) {
	// A loaded machine can take longer than a short TTL between the first
	// grant and the third request: then the check is made again with twice
	// the TTL, on a new name.
	for ttl := 200 * time.Millisecond; !semaphoreCrashedHolderTTL(t, s, ttl); ttl *= 2 {
		if ttl >= 10*time.Second {
			t.Fatalf("the third request came after the TTL (%v) every time", ttl)
		}
	}
}

// semaphoreCrashedHolderTTL is semaphoreCrashedHolder with a crashed permit
// of the given TTL. It reports false, having checked nothing, when the third
// request was granted at or after the TTL (the crashed permit had run out).
func semaphoreCrashedHolderTTL(t *testing.T, s store.Store, ttl time.Duration) bool {
	ctx := testContext(t)
	name := lockName(t)
	start := time.Now()
	crashed := semaphoreReq(name, 2, ttl)
	mustAcquire(t, s, crashed)
	live := semaphoreReq(name, 2, longTTL)
	mustAcquire(t, s, live)
	next := semaphoreReq(name, 2, longTTL)
	g, err := s.Acquire(ctx, next)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v, want a refusal", name, err)
	}
	if g.Acquired {
		if d := time.Since(start); d < ttl-clockSlack {
			t.Fatalf("Acquire(%q) = %+v %v after the first of two permits; want a refusal (both are held)", name, g, d)
		}
		t.Logf("TTL %v: the third request was answered %v after the first grant; again with a longer TTL", ttl, time.Since(start))
		mustRelease(t, s, live)
		mustRelease(t, s, next)
		return false
	}
	if g.RetryAfter <= 0 || g.RetryAfter > ttl {
		t.Errorf("RetryAfter = %v, want in (0, %v] (the crashed permit's remaining TTL)", g.RetryAfter, ttl)
	}
	_, at := acquireWhenFree(t, s, next)
	if d := at.Sub(start); d < ttl-clockSlack {
		t.Errorf("permit returned %v after a holder with TTL %v; want not before the TTL", d, ttl)
	}
	mustNotHold(t, s, crashed, "of an expired permit")
	mustRelease(t, s, live)
	mustRelease(t, s, next)
	return true
}

// semaphoreBadLimit checks that a limit below 1 is rejected.
func semaphoreBadLimit(t *testing.T, s store.Store) {
	ctx := testContext(t)
	for _, n := range []int{0, -1} {
		req := semaphoreReq(lockName(t), n, longTTL)
		g, err := s.Acquire(ctx, req)
		if g.Acquired {
			s.Release(ctx, req)
		}
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Acquire with Limit %d = %+v, %v; want an error wrapping ErrInvalid", n, g, err)
		}
	}
	l := newLocker(t, s)
	if _, err := l.Semaphore(lockName(t), 0).TryAcquire(ctx); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Semaphore(name, 0).TryAcquire = %v, want ErrInvalid", err)
	}
}

// semaphoreInspector checks that State reports the holders and the limit.
func semaphoreInspector(t *testing.T, s store.Store) {
	in, ok := s.(store.Inspector)
	if !ok {
		t.Skip("store does not implement store.Inspector")
	}
	name := lockName(t)
	a, b := semaphoreReq(name, 3, longTTL), semaphoreReq(name, 3, longTTL)
	mustAcquire(t, s, a)
	gb := mustAcquire(t, s, b)
	st, err := in.State(testContext(t), name)
	if err != nil {
		t.Fatalf("State(%q) = %v", name, err)
	}
	if st.Mode != store.ModeSemaphore || st.Holders != 2 || st.Limit != 3 || st.Fence < gb.Fence || st.TTL <= 0 {
		t.Errorf("State(%q) = %+v, want Mode semaphore, 2 holders, Limit 3, Fence >= %d", name, st, gb.Fence)
	}
	checkListed(t, in, st)
	mustRelease(t, s, a)
	mustRelease(t, s, b)
}

// semaphoreLockerNeverMoreThanN checks Acquire through several Lockers.
func semaphoreLockerNeverMoreThanN(t *testing.T, s store.Store) {
	const n, lockers, perLocker, rounds = 2, 3, 3, 6
	ctx := testContext(t)
	name := lockName(t)
	var (
		inside atomic.Int32
		over   atomic.Int64
		wg     sync.WaitGroup
		e      errs
	)
	for range lockers {
		sem := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithBackoff(time.Millisecond, 20*time.Millisecond)).Semaphore(name, n)
		for range perLocker {
			wg.Go(func() {
				for range rounds {
					lease, err := sem.Acquire(ctx)
					if err != nil {
						e.add(fmt.Errorf("Acquire(%q) = %v", name, err))
						return
					}
					if k := inside.Add(1); k > n {
						over.Add(1)
					}
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
	if k := over.Load(); k != 0 {
		t.Errorf("%d times more than %d holders were inside", k, n)
	}
}

// semaphoreLockerWoken checks that a waiting Acquire is woken by the store
// when a permit is released through another store.
func semaphoreLockerWoken(t *testing.T, s, peer store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	a, b := semaphoreReq(name, 2, longTTL), semaphoreReq(name, 2, longTTL)
	mustAcquire(t, peer, a)
	mustAcquire(t, peer, b)
	spy := newSpy(s)
	lease := checkWoken(t, spy, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.Semaphore(name, 2).Acquire(ctx)
	}, func() { spy.waitRefused(t) }, func() error { return peer.Release(ctx, b) })
	lease.Release(ctx)
	mustRelease(t, peer, a)
}
