package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// testMutexLocker checks ModeMutex through a dlock.Locker on the store:
// the behaviour users see.
func testMutexLocker(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"MutualExclusion", lockerMutualExclusion},
		{"TryLockHeld", lockerTryLockHeld},
		{"FencesIncrease", lockerFencesIncrease},
		{"TTLExpiry", lockerTTLExpiry},
		{"ReleaseTwice", lockerReleaseTwice},
		{"WaiterWokenOnRelease", lockerWokenOnRelease},
		{"WaiterWokenOnExpiry", lockerWokenOnExpiry},
		{"LockContextEnds", lockerContextEnds},
		{"LeaseLostOnExtend", lockerLostOnExtend},
		{"LeaseLostOnRenew", lockerLostOnRenew},
		{"WatchdogSurvives", lockerWatchdog},
		{"DoCancelsOnLoss", lockerDoCancels},
		{"Do", lockerDo},
		{"BadNames", lockerBadNames},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parallel(t)
			tt.fn(t, h.New(t))
		})
	}
}

// lockerMutualExclusion runs goroutines on several Lockers that Lock,
// check that nobody else is inside, and Release, for many rounds.
func lockerMutualExclusion(t *testing.T, s store.Store) {
	const lockers, perLocker, rounds = 4, 4, 8
	ctx := testContext(t)
	name := lockName(t)
	var (
		inside    atomic.Int32
		counter   atomic.Int64
		lastFence atomic.Int64
		overlaps  atomic.Int64
		entries   atomic.Int64
		wg        sync.WaitGroup
	)
	for range lockers {
		// Short backoff keeps the test quick on a store whose wake-ups
		// reach only some waiters; this test is about exclusion.
		l := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithBackoff(time.Millisecond, 20*time.Millisecond))
		m := l.Mutex(name)
		for range perLocker {
			wg.Go(func() {
				for range rounds {
					lease, err := m.Lock(ctx)
					if err != nil {
						t.Errorf("Lock(%q) = %v", name, err)
						return
					}
					if n := inside.Add(1); n != 1 {
						overlaps.Add(1)
					}
					entries.Add(1)
					last := lastFence.Load()
					lastFence.Store(lease.Fence())
					v := counter.Load()
					runtime.Gosched()
					counter.Store(v + 1)
					inside.Add(-1)
					if err := lease.Release(ctx); err != nil {
						t.Errorf("Release = %v, want nil", err)
						return
					}
					if lease.Fence() <= last {
						t.Errorf("lease fence %d after fence %d; want strictly increasing", lease.Fence(), last)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d critical sections overlapped, want 0", n)
	}
	if got, want := counter.Load(), entries.Load(); got != want {
		t.Errorf("counter = %d after %d critical sections; updates were lost to overlaps", got, want)
	}
	if n := entries.Load(); !t.Failed() && n != lockers*perLocker*rounds {
		t.Errorf("%d critical sections, want %d", n, lockers*perLocker*rounds)
	}
}

// lockerTryLockHeld checks TryLock's error on a held lock.
func lockerTryLockHeld(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	const ttl = 5 * time.Second
	l := newLocker(t, s, dlock.WithTTL(ttl))
	lease, start, err := tryLockShort(ctx, l.Mutex(name))
	if err != nil {
		t.Fatalf("TryLock(%q) on a free lock = %v", name, err)
	}
	l2 := newLocker(t, s)
	got, err := l2.Mutex(name).TryLock(ctx)
	elapsed := time.Since(start)
	var le *dlock.LockedError
	if got != nil || !errors.Is(err, dlock.ErrLocked) || !errors.As(err, &le) {
		t.Fatalf("TryLock(%q) on a held lock = %v, %v; want a *LockedError", name, got, err)
	}
	if le.Name != name || le.RetryAfter <= 0 || le.RetryAfter > ttl || le.RetryAfter < ttl-elapsed-100*time.Millisecond {
		t.Errorf("LockedError = %+v, want Name %q and RetryAfter in [%v, %v]", le, name, ttl-elapsed-100*time.Millisecond, ttl)
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("Release = %v, want nil", err)
	}
	lease2, err := l2.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(%q) after Release = %v", name, err)
	}
	if lease2.Fence() <= lease.Fence() {
		t.Errorf("fence after Release = %d, want > %d", lease2.Fence(), lease.Fence())
	}
	lease2.Release(ctx)
}

// lockerFencesIncrease checks lease fences over many grants, across
// Lockers.
func lockerFencesIncrease(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	ms := []*dlock.Mutex{newLocker(t, s).Mutex(name), newLocker(t, s).Mutex(name)}
	var last int64
	for i := range 20 {
		lease, err := ms[i%2].TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock %d = %v", i, err)
		}
		if lease.Fence() <= last {
			t.Fatalf("grant %d: fence %d after fence %d; want strictly increasing", i, lease.Fence(), last)
		}
		last = lease.Fence()
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("Release = %v, want nil", err)
		}
	}
}

// tryLockShort is TryLock of a lease with a short TTL, asked again while
// it fails with ErrUnavailable (for up to waitTimeout): on a loaded machine
// a grant may come back after such a lease ran out, and the Locker then
// gives it back and reports a *StoreError. It returns when the granted
// attempt started.
func tryLockShort(ctx context.Context, m *dlock.Mutex) (*dlock.Lease, time.Time, error) {
	deadline := time.Now().Add(waitTimeout)
	for {
		start := time.Now()
		lease, err := m.TryLock(ctx)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || time.Now().After(deadline) {
			return lease, start, err
		}
	}
}

// lockerTTLExpiry checks that a lease that is not renewed ends locally
// (Done, ErrLeaseLost) before the store lets another holder in, and that
// the lock becomes free, not before its TTL.
func lockerTTLExpiry(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	const ttl = 200 * time.Millisecond
	l := newLocker(t, s, dlock.WithTTL(ttl))
	lease, start, err := tryLockShort(ctx, l.Mutex(name))
	if err != nil {
		t.Fatalf("TryLock(%q) = %v", name, err)
	}
	if d := lease.TTL(); d > ttl {
		t.Errorf("TTL() just after the grant = %v, want at most %v", d, ttl)
	}

	m2 := newLocker(t, s, dlock.WithTTL(longTTL)).Mutex(name)
	deadline := start.Add(waitTimeout)
	for {
		lease2, err := m2.TryLock(ctx)
		returned := time.Since(start)
		if err == nil {
			defer lease2.Release(ctx)
			if returned < ttl-clockSlack {
				t.Fatalf("lock with TTL %v taken by another Locker %v after the grant; want not before the TTL", ttl, returned)
			}
			// The store decided before now: if the first lease is still
			// valid now, two leases were valid at once.
			if d := lease.TTL(); d > 0 {
				t.Fatalf("another Locker took the lock while the first lease was valid for %v more", d)
			}
			if lease2.Fence() <= lease.Fence() {
				t.Errorf("fence after expiry = %d, want > %d", lease2.Fence(), lease.Fence())
			}
			break
		}
		var le *dlock.LockedError
		if !errors.As(err, &le) {
			t.Fatalf("TryLock(%q) = %v, want a lease or a *LockedError", name, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock with TTL %v still held %v later", ttl, waitTimeout)
		}
		time.Sleep(min(max(le.RetryAfter, time.Millisecond), 20*time.Millisecond))
	}

	if !waitClosed(lease.Done()) {
		t.Fatalf("Done not closed %v after a lease with TTL %v", waitTimeout, ttl)
	}
	t.Logf("lease with TTL %v ended locally by %v after the grant", ttl, time.Since(start))
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Err() of an expired lease = %v, want ErrLeaseLost", err)
	}
	if d := lease.TTL(); d != 0 {
		t.Errorf("TTL() of an expired lease = %v, want 0", d)
	}
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Release of an expired lease = %v, want ErrLeaseLost", err)
	}
	if err := lease.Extend(ctx, 0); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Extend of an expired lease = %v, want ErrLeaseLost", err)
	}
}

// lockerReleaseTwice checks Release and Extend after Release.
func lockerReleaseTwice(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	lease, err := newLocker(t, s, dlock.WithTTL(10*time.Second)).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	if err := lease.Extend(ctx, 20*time.Second); err != nil {
		t.Errorf("Extend of a held lease = %v, want nil", err)
	}
	if d := lease.TTL(); d <= 10*time.Second {
		t.Errorf("TTL() after Extend to 20s = %v, want > 10s", d)
	}
	if g := mustRefuse(t, s, mutexReq(name, newToken(), time.Second)); g.RetryAfter <= 10*time.Second {
		t.Errorf("RetryAfter after Extend to 20s = %v, want > 10s", g.RetryAfter)
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("Release = %v, want nil", err)
	}
	if !isClosed(lease.Done()) {
		t.Errorf("Done not closed after Release")
	}
	if err := lease.Err(); err != nil {
		t.Errorf("Err() after Release = %v, want nil", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
	if err := lease.Extend(ctx, 0); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Extend after Release = %v, want ErrNotHeld", err)
	}
}

// lockerWokenOnRelease checks that a waiting Lock takes the lock after
// the holder releases it, and logs how long that took.
func lockerWokenOnRelease(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	holder, err := newLocker(t, s, dlock.WithTTL(longTTL)).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(%q) = %v", name, err)
	}
	spy := newSpy(s)
	m := newLocker(t, spy.store(), dlock.WithTTL(longTTL)).Mutex(name)
	type result struct {
		lease *dlock.Lease
		err   error
		at    time.Time
	}
	done := make(chan result, 1)
	go func() {
		lease, err := m.Lock(ctx)
		done <- result{lease, err, time.Now()}
	}()
	spy.waitWaiting(t) // the waiter asked and is waiting now
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("waiting Lock(%q) = %v, want a lease after the holder's release", name, r.err)
	}
	t.Logf("waiter took the lock %v after the release call (%d store calls)", r.at.Sub(released), spy.calls.Load())
	if r.lease.Fence() <= holder.Fence() {
		t.Errorf("waiter fence = %d, want > %d", r.lease.Fence(), holder.Fence())
	}
	r.lease.Release(ctx)
}

// lockerWokenOnExpiry checks that a waiting Lock takes the lock after the
// holder's TTL runs out without a release, and not before.
func lockerWokenOnExpiry(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	const ttl = 300 * time.Millisecond
	start := time.Now()
	g := mustAcquire(t, s, mutexReq(name, newToken(), ttl)) // a holder that dies
	m := newLocker(t, s, dlock.WithTTL(longTTL)).Mutex(name)
	lctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	lease, err := m.Lock(lctx)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("waiting Lock(%q) = %v, want a lease after the holder's TTL", name, err)
	}
	defer lease.Release(ctx)
	if took < ttl-clockSlack {
		t.Fatalf("waiter took a lock with TTL %v after %v; want not before the TTL", ttl, took)
	}
	if lease.Fence() <= g.Fence {
		t.Errorf("waiter fence = %d, want > %d", lease.Fence(), g.Fence)
	}
	t.Logf("waiter took the lock %v after the holder's TTL ran out", took-ttl)
}

// lockerContextEnds checks that Lock returns when its ctx ends, with an
// error matching both ErrLocked and ctx.Err(), and leaves nothing behind.
func lockerContextEnds(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	holder, err := newLocker(t, s, dlock.WithTTL(longTTL)).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(%q) = %v", name, err)
	}
	spy := newSpy(s)
	m := newLocker(t, spy.store()).Mutex(name)

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	lease, err := m.Lock(dctx)
	cancel()
	if lease != nil || !errors.Is(err, dlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with a deadline on a held lock = %v, %v; want an error matching ErrLocked and DeadlineExceeded", lease, err)
	}

	spy.drain()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		lease, err := m.Lock(cctx)
		if lease != nil {
			lease.Release(ctx)
		}
		done <- err
	}()
	spy.waitWaiting(t)
	cancel()
	if err := <-done; !errors.Is(err, dlock.ErrLocked) || !errors.Is(err, context.Canceled) {
		t.Errorf("Lock cancelled on a held lock = %v; want an error matching ErrLocked and Canceled", err)
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if in, ok := s.(store.Inspector); ok {
		if st, err := in.State(ctx, name); err != nil || st.Holders != 0 || st.Queue != 0 {
			t.Errorf("State(%q) after the waiters gave up and the holder released = %+v, %v; want no holders and no queue", name, st, err)
		}
	}
	g := mustAcquire(t, s, mutexReq(name, newToken(), time.Second))
	if g.Fence <= holder.Fence() {
		t.Errorf("fence after the waiters gave up = %d, want > %d", g.Fence, holder.Fence())
	}
}

// lockerLostOnExtend checks that a lease whose hold was deleted on the
// store reports ErrLeaseLost on Extend, and that Done closes.
func lockerLostOnExtend(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	lease, err := newLocker(t, s, dlock.WithTTL(10*time.Second)).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(%q) = %v", name, err)
	}
	if err := s.Release(ctx, mutexReq(name, lease.Token(), 0)); err != nil {
		t.Fatalf("Release on the store with the lease's token = %v, want nil", err)
	}
	if err := lease.Extend(ctx, 0); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Extend of a lease deleted on the store = %v, want ErrLeaseLost", err)
	}
	if !isClosed(lease.Done()) {
		t.Errorf("Done not closed after Extend reported the loss")
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Err() = %v, want ErrLeaseLost", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Release of a lost lease = %v, want ErrLeaseLost", err)
	}
}

// lockerLostOnRenew checks that an auto-renewed lease whose hold was
// deleted on the store ends with ErrLeaseLost at its next renewal.
func lockerLostOnRenew(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	lease, _, err := tryLockShort(ctx, newLocker(t, s, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew()).Mutex(name))
	if err != nil {
		t.Fatalf("TryLock(%q) = %v", name, err)
	}
	if err := s.Release(ctx, mutexReq(name, lease.Token(), 0)); err != nil {
		t.Fatalf("Release on the store with the lease's token = %v, want nil", err)
	}
	if !waitClosed(lease.Done()) {
		t.Fatalf("Done of an auto-renewed lease deleted on the store not closed within %v", waitTimeout)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Err() = %v, want ErrLeaseLost", err)
	}
}

// lockerWatchdog checks that an auto-renewed lease outlives its TTL
// several times over and keeps the lock held. It renews at TTL/6 rather
// than the default TTL/3 to leave more room for a stalled test process. A
// lease the Locker ends
// because a renewal came too late on an overloaded machine is retried (a
// few times); a renewal the store refuses, or another token taking the
// lock while the lease is locally valid, fails at once.
func lockerWatchdog(t *testing.T, s store.Store) {
	const attempts = 5
	for i := 1; ; i++ {
		err := watchdogAttempt(t, s)
		if err == nil {
			return
		}
		if i == attempts {
			t.Fatalf("attempt %d: %v", i, err)
		}
		t.Logf("attempt %d: %v; retrying", i, err)
	}
}

// watchdogAttempt fails t on a safety violation and returns an error when
// the lease ended for lack of time.
func watchdogAttempt(t *testing.T, s store.Store) error {
	ctx := testContext(t)
	name := lockName(t)
	// 1s, not less: with 300ms a renewal ~250ms late (a loaded machine
	// under -race, a slow store) ended the lease; the attempts then fail
	// together while the load lasts. The check is the same over 3 TTLs.
	const ttl = time.Second
	var refused atomic.Bool
	observe := func(ev dlock.Event) {
		if ev.Kind == dlock.EventRenew && ev.Result == "lost" {
			refused.Store(true)
		}
	}
	l := newLocker(t, s, dlock.WithTTL(ttl), dlock.WithAutoRenew(), dlock.WithRenewInterval(ttl/6), dlock.WithObserver(observe))
	lease, err := l.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(%q) = %v", name, err)
	}
	defer l.Close()
	timer := time.NewTimer(3 * ttl)
	select {
	case <-lease.Done():
		timer.Stop()
		if refused.Load() {
			t.Fatalf("the store refused to renew a held lease: %v", lease.Err())
		}
		return fmt.Errorf("auto-renewed lease with TTL %v ended: %v", ttl, lease.Err())
	case <-timer.C:
	}
	other := mutexReq(name, newToken(), time.Second)
	g, err := s.Acquire(ctx, other)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", name, err)
	}
	if g.Acquired {
		s.Release(ctx, other)
		// The store decided before now; if the lease is still valid now,
		// it was valid then too and the store let the lock go early.
		if d := lease.TTL(); d > 0 {
			t.Fatalf("another token took the lock while the auto-renewed lease was valid for %v more", d)
		}
		return fmt.Errorf("auto-renewed lease with TTL %v ended before the check: %v", ttl, lease.Err())
	}
	if g.RetryAfter <= 0 {
		t.Errorf("RetryAfter on the renewed lock = %v, want > 0", g.RetryAfter)
	}
	if err := lease.Release(ctx); errors.Is(err, dlock.ErrLeaseLost) && !refused.Load() {
		return fmt.Errorf("auto-renewed lease with TTL %v ended before Release: %v", ttl, err)
	} else if err != nil {
		t.Fatalf("Release of the renewed lease = %v, want nil", err)
	}
	mustAcquire(t, s, mutexReq(name, newToken(), time.Second))
	return nil
}

// lockerDoCancels checks that Locker.Do cancels fn's ctx when the lease is
// lost, and returns an error wrapping ErrLeaseLost.
func lockerDoCancels(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	l := newLocker(t, s)
	var lost time.Time
	err := l.Do(ctx, name, func(ctx context.Context) error {
		lease := dlock.LeaseFromContext(ctx, name)
		if lease == nil {
			return errors.New("no lease in fn's ctx")
		}
		if err := s.Release(ctx, mutexReq(name, lease.Token(), 0)); err != nil {
			return fmt.Errorf("Release on the store with the lease's token = %w", err)
		}
		lost = time.Now()
		timer := time.NewTimer(waitTimeout)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			t.Logf("fn's ctx cancelled %v after the hold was deleted", time.Since(lost))
			return context.Cause(ctx)
		case <-timer.C:
			return fmt.Errorf("fn's ctx not cancelled %v after the lease was lost", waitTimeout)
		}
	}, dlock.WithTTL(600*time.Millisecond))
	if !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Do with a lost lease = %v, want ErrLeaseLost", err)
	}
}

// lockerDo checks the plain path of Locker.Do.
func lockerDo(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	l := newLocker(t, s)
	errFn := errors.New("fn failed")
	var fence int64
	err := l.Do(ctx, name, func(ctx context.Context) error {
		lease := dlock.LeaseFromContext(ctx, name)
		if lease == nil {
			t.Errorf("no lease on %q in fn's ctx", name)
			return errFn
		}
		fence = lease.Fence()
		mustRefuse(t, s, mutexReq(name, newToken(), time.Second))
		return errFn
	})
	if err != errFn {
		t.Errorf("Do = %v, want fn's error %v", err, errFn)
	}
	g := mustAcquire(t, s, mutexReq(name, newToken(), time.Second))
	if g.Fence <= fence {
		t.Errorf("fence after Do = %d, want > %d", g.Fence, fence)
	}
}

// lockerBadNames checks that invalid names are rejected with an
// *InvalidError before the store is asked.
func lockerBadNames(t *testing.T, s store.Store) {
	ctx := testContext(t)
	spy := newSpy(s)
	l := newLocker(t, spy.store())
	for _, name := range []string{"", strings.Repeat("x", 257), "a\x00b", "a\nb", "\xff\xfe", "a\u0085b"} {
		var ie *store.InvalidError
		if lease, err := l.Mutex(name).TryLock(ctx); lease != nil || !errors.As(err, &ie) {
			t.Errorf("TryLock(%q) = %v, %v; want an *InvalidError", name, lease, err)
		}
		if lease, err := l.Mutex(name).Lock(ctx); lease != nil || !errors.As(err, &ie) {
			t.Errorf("Lock(%q) = %v, %v; want an *InvalidError", name, lease, err)
		}
		ran := false
		if err := l.Do(ctx, name, func(context.Context) error { ran = true; return nil }); ran || !errors.As(err, &ie) {
			t.Errorf("Do(%q) = %v (fn ran: %v); want an *InvalidError and fn not run", name, err, ran)
		}
	}
	if n := spy.calls.Load(); n != 0 {
		t.Errorf("store called %d times for invalid names, want 0", n)
	}
}
