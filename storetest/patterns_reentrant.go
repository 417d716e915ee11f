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

func init() { register("Reentrant", store.ModeReentrant, testReentrant) }

// testReentrant checks ModeReentrant on the store and through a Locker.
func testReentrant(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Counts", reentrantCounts},
		{"ExpiryClearsWholeHold", reentrantExpiry},
		{"ReentryNeverShortensHold", reentrantNeverShortens},
		{"RetryNeverShortensOthers", reentrantRetryKeepsOthers},
		{"Inspector", reentrantInspector},
		{"LockerWokenOnRelease", func(t *testing.T, s store.Store) { reentrantLockerWoken(t, s, peerStore(t, h, s)) }},
		{"LockerNested", reentrantLockerNested},
		{"LockerOwners", reentrantLockerOwners},
		{"LockerMutualExclusion", reentrantLockerExclusion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parallel(t)
			tt.fn(t, h.New(t))
		})
	}
}

func reentrantReq(name, owner string, ttl time.Duration) store.Request {
	return store.Request{Name: name, Token: newToken(), TTL: ttl, Mode: store.ModeReentrant, Owner: owner}
}

// reentrantCounts checks that the owner's acquisitions are counted, each
// one released once, that re-entry keeps the fence, that a repeated
// Acquire is idempotent, and that the count never goes below zero.
func reentrantCounts(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	owner := newToken()
	a := reentrantReq(name, owner, longTTL)
	ga := mustAcquire(t, s, a)
	if ga.Count != 1 {
		t.Errorf("first Acquire Count = %d, want 1", ga.Count)
	}
	b := reentrantReq(name, owner, longTTL)
	gb := mustAcquire(t, s, b)
	if gb.Count != 2 || gb.Fence != ga.Fence {
		t.Errorf("re-entry = %+v, want Count 2 and the first fence %d", gb, ga.Fence)
	}
	if g := mustAcquire(t, s, b); g.Count != 2 || g.Fence != ga.Fence {
		t.Errorf("repeated Acquire by the same token = %+v, want Count 2 and fence %d (idempotent)", g, ga.Fence)
	}
	other := reentrantReq(name, newToken(), longTTL)
	if g := mustRefuse(t, s, other); g.RetryAfter <= 0 {
		t.Errorf("refusal of another owner RetryAfter = %v, want > 0", g.RetryAfter)
	}
	// A request without an owner is its own owner.
	mustRefuse(t, s, reentrantReq(name, "", longTTL))

	mustRelease(t, s, b)
	mustNotHold(t, s, b, "of a released acquisition")
	mustRefuse(t, s, other) // a's acquisition still holds
	if err := s.Extend(ctx, []store.Request{a})[0]; err != nil {
		t.Errorf("Extend of the remaining acquisition = %v, want nil", err)
	}
	c := reentrantReq(name, owner, longTTL)
	if g := mustAcquire(t, s, c); g.Count != 2 || g.Fence != ga.Fence {
		t.Errorf("re-entry after a release = %+v, want Count 2 and fence %d", g, ga.Fence)
	}
	mustRelease(t, s, c)
	mustRelease(t, s, a)
	mustNotHold(t, s, a, "after the count reached zero")
	mustNotHold(t, s, reentrantReq(name, owner, longTTL), "of an unknown token of the owner")

	g := mustAcquire(t, s, other)
	if g.Count != 1 || g.Fence <= ga.Fence {
		t.Errorf("Acquire by another owner after the last release = %+v, want Count 1 and fence > %d", g, ga.Fence)
	}
	mustRelease(t, s, other)
}

// reentrantExpiry checks that when the hold's TTL runs out, every
// acquisition of it is gone at once, and not before.
func reentrantExpiry(t *testing.T, s store.Store) {
	name := lockName(t)
	owner := newToken()
	const ttl = 200 * time.Millisecond
	start := time.Now()
	a := reentrantReq(name, owner, ttl)
	b := reentrantReq(name, owner, ttl)
	ga := mustAcquire(t, s, a)
	mustAcquire(t, s, b)
	other := reentrantReq(name, newToken(), longTTL)
	g, at := acquireWhenFree(t, s, other)
	if d := at.Sub(start); d < ttl-clockSlack {
		t.Errorf("another owner got the lock %v after a hold with TTL %v; want not before the TTL", d, ttl)
	}
	if g.Count != 1 || g.Fence <= ga.Fence {
		t.Errorf("grant after expiry = %+v, want Count 1 and fence > %d", g, ga.Fence)
	}
	mustNotHold(t, s, a, "of an expired hold")
	mustNotHold(t, s, b, "of an expired hold")
	mustRelease(t, s, other)
}

// reentrantNeverShortens checks that a re-entry or renewal with a short TTL
// does not cut the hold short.
func reentrantNeverShortens(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	owner := newToken()
	const short = 150 * time.Millisecond
	a := reentrantReq(name, owner, longTTL)
	mustAcquire(t, s, a)
	b := reentrantReq(name, owner, short)
	mustAcquire(t, s, b)
	if err := s.Extend(ctx, []store.Request{b})[0]; err != nil {
		t.Fatalf("Extend(%q) = %v, want nil", name, err)
	}
	mustRelease(t, s, b)
	sleepUntil(time.Now().Add(2 * short))
	g := mustRefuse(t, s, reentrantReq(name, newToken(), longTTL))
	if g.RetryAfter < longTTL/2 {
		t.Errorf("RetryAfter after a short re-entry = %v, want about %v (the outer hold's TTL)", g.RetryAfter, longTTL)
	}
	if err := s.Extend(ctx, []store.Request{a})[0]; err != nil {
		t.Errorf("Extend of the outer acquisition = %v, want nil", err)
	}
	mustRelease(t, s, a)
}

// reentrantRetryKeepsOthers checks that a retried Acquire with a short TTL
// does not cut short the owner's other acquisitions (found by RunModel on
// store/etcd: the retry renewed every acquisition's lease to its own TTL).
func reentrantRetryKeepsOthers(t *testing.T, s store.Store) {
	name := lockName(t)
	owner := newToken()
	const short = 150 * time.Millisecond
	a := reentrantReq(name, owner, longTTL)
	mustAcquire(t, s, a)
	b := reentrantReq(name, owner, longTTL)
	mustAcquire(t, s, b)
	a.TTL = short
	if g := mustAcquire(t, s, a); g.Count != 2 {
		t.Errorf("retried Acquire with a short TTL: Count = %d, want 2", g.Count)
	}
	sleepUntil(time.Now().Add(3 * short))
	c := reentrantReq(name, owner, longTTL)
	if g := mustAcquire(t, s, c); g.Count < 2 {
		t.Errorf("re-entry %v after a short retry: Count = %d, want b's acquisition still counted (2 or 3)", 3*short, g.Count)
	}
	mustRefuse(t, s, reentrantReq(name, newToken(), longTTL))
	for _, r := range []store.Request{a, b, c} {
		s.Release(testContext(t), r)
	}
}

// reentrantInspector checks that State reports one holder (the owner),
// however many acquisitions it has, and that List has the lock.
func reentrantInspector(t *testing.T, s store.Store) {
	in, ok := s.(store.Inspector)
	if !ok {
		t.Skip("store does not implement store.Inspector")
	}
	name := lockName(t)
	owner := newToken()
	a, b := reentrantReq(name, owner, longTTL), reentrantReq(name, owner, longTTL)
	g := mustAcquire(t, s, a)
	mustAcquire(t, s, b)
	st, err := in.State(testContext(t), name)
	if err != nil {
		t.Fatalf("State(%q) = %v", name, err)
	}
	if st.Mode != store.ModeReentrant || st.Holders != 1 || st.Fence != g.Fence || st.TTL <= 0 || st.Queue != 0 {
		t.Errorf("State(%q) = %+v, want Mode reentrant, 1 holder, Fence %d", name, st, g.Fence)
	}
	checkListed(t, in, st)
	mustRelease(t, s, a)
	mustRelease(t, s, b)
	if st, _ := in.State(testContext(t), name); st.Holders != 0 {
		t.Errorf("State(%q) after the last release = %+v, want no holder", name, st)
	}
}

// reentrantLockerNested checks nested Do and Lock calls through a Locker:
// the ctx carries the owner, the count rises and falls, the fence stays.
func reentrantLockerNested(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	r := l.Reentrant(name)
	stranger := newLocker(t, s).Reentrant(name)
	var outerFence int64
	err := r.Do(ctx, func(ctx context.Context) error {
		outer := dlock.LeaseFromContext(ctx, name)
		if outer == nil || outer.Count() != 1 {
			return fmt.Errorf("lease in Do's ctx = %v, want one with Count 1", outer)
		}
		outerFence = outer.Fence()
		return r.Do(ctx, func(ctx context.Context) error {
			inner := dlock.LeaseFromContext(ctx, name)
			if inner.Count() != 2 || inner.Fence() != outerFence {
				return fmt.Errorf("nested Do lease Count %d fence %d, want 2 and %d", inner.Count(), inner.Fence(), outerFence)
			}
			third, err := r.TryLock(ctx)
			if err != nil {
				return fmt.Errorf("TryLock nested twice = %v, want a re-entry", err)
			}
			if third.Count() != 3 || third.Fence() != outerFence {
				t.Errorf("third acquisition Count %d fence %d, want 3 and %d", third.Count(), third.Fence(), outerFence)
			}
			if err := third.Release(ctx); err != nil {
				t.Errorf("Release of the third acquisition = %v", err)
			}
			if err := third.Release(ctx); !errors.Is(err, store.ErrNotHeld) {
				t.Errorf("second Release of one acquisition = %v, want ErrNotHeld", err)
			}
			if _, err := stranger.TryLock(context.Background()); !errors.Is(err, dlock.ErrLocked) {
				t.Errorf("TryLock by another owner while nested = %v, want ErrLocked", err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
	lease, err := stranger.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the outer Do returned = %v, want the lock free", err)
	}
	if lease.Count() != 1 || lease.Fence() <= outerFence {
		t.Errorf("next owner's lease Count %d fence %d, want 1 and > %d", lease.Count(), lease.Fence(), outerFence)
	}
	lease.Release(ctx)
}

// reentrantLockerOwners checks explicit owner IDs across Lockers and that
// unrelated contexts exclude each other.
func reentrantLockerOwners(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	owner := newToken()
	a, err := newLocker(t, s).Reentrant(name, dlock.WithOwner(owner)).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with owner = %v", err)
	}
	b, err := newLocker(t, s).Reentrant(name, dlock.WithOwner(owner)).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with the same owner on another Locker = %v, want a re-entry", err)
	}
	if b.Count() != 2 || b.Fence() != a.Fence() {
		t.Errorf("re-entry by owner ID Count %d fence %d, want 2 and %d", b.Count(), b.Fence(), a.Fence())
	}
	r := newLocker(t, s).Reentrant(name)
	if _, err := r.TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("TryLock without owner or lease in ctx = %v, want ErrLocked", err)
	}
	a.Release(ctx)
	b.Release(ctx)
	c, err := r.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after both releases = %v", err)
	}
	if _, err := r.TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("second TryLock with an unrelated ctx = %v, want ErrLocked (a new owner)", err)
	}
	c.Release(ctx)
}

// reentrantLockerExclusion runs owners on several Lockers that each take
// the lock and re-enter it, checking that no two owners are ever inside.
func reentrantLockerExclusion(t *testing.T, s store.Store) {
	const lockers, perLocker, rounds = 3, 3, 5
	ctx := testContext(t)
	name := lockName(t)
	var (
		inside   atomic.Int32
		overlaps atomic.Int64
		wg       sync.WaitGroup
		e        errs
	)
	for range lockers {
		l := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithBackoff(time.Millisecond, 20*time.Millisecond))
		r := l.Reentrant(name)
		for range perLocker {
			wg.Go(func() {
				for range rounds {
					err := r.Do(ctx, func(ctx context.Context) error {
						if n := inside.Add(1); n != 1 {
							overlaps.Add(1)
						}
						defer inside.Add(-1)
						runtime.Gosched()
						return r.Do(ctx, func(ctx context.Context) error {
							if n := inside.Load(); n != 1 {
								overlaps.Add(1)
							}
							return nil
						})
					})
					if err != nil {
						e.add(fmt.Errorf("Do(%q) = %v", name, err))
						return
					}
				}
			})
		}
	}
	wg.Wait()
	e.report(t)
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times two owners were inside together, want 0", n)
	}
}

// reentrantLockerWoken checks that a waiting Lock is woken by the store
// when the other owner's last acquisition is released through another store.
func reentrantLockerWoken(t *testing.T, s, peer store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	a := reentrantReq(name, newToken(), longTTL)
	mustAcquire(t, peer, a)
	spy := newSpy(s)
	lease := checkWoken(t, spy, func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error) {
		return l.Reentrant(name).Lock(ctx)
	}, func() { spy.waitRefused(t) }, func() error { return peer.Release(ctx, a) })
	lease.Release(ctx)
}
