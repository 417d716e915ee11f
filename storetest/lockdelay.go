package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// The lock-delay suite: with dlock.WithLockDelay, a hold that ends by
// expiry or lease loss keeps the name for the delay, judged by the store's
// clock; a clean release frees it at once. On a store that does not
// implement store.LockDelayer it checks that a lock-delay is refused with
// ErrNotSupported, and skips the rest.

func init() { register("LockDelay", store.ModeMutex, testLockDelay) }

func testLockDelay(t *testing.T, h Harness) {
	if s := h.New(t); !store.SupportsLockDelay(s) {
		// The store documents that it cannot: the Locker refuses.
		l := newLocker(t, s)
		lease, err := l.Mutex(lockName(t), dlock.WithLockDelay(time.Second)).TryLock(testContext(t))
		if lease != nil {
			lease.Release(testContext(t))
		}
		if !errors.Is(err, store.ErrNotSupported) {
			t.Errorf("TryLock with a lock-delay on a store without store.LockDelayer = %v, want ErrNotSupported", err)
		}
		t.Skip("the store does not implement store.LockDelayer")
	}
	t.Run("Expiry", func(t *testing.T) {
		parallel(t)
		lockDelayExpiry(t, h.New(t))
	})
	t.Run("LeaseLoss", func(t *testing.T) {
		parallel(t)
		lockDelayLoss(t, h.New(t))
	})
	t.Run("ReleaseFreesAtOnce", func(t *testing.T) {
		parallel(t)
		lockDelayRelease(t, h.New(t))
	})
	t.Run("Election", func(t *testing.T) {
		if !h.supports(store.ModeElection) {
			t.Skip("elections are unsupported by this store")
		}
		parallel(t)
		lockDelayElection(t, h.New(t))
	})
	t.Run("BadOption", func(t *testing.T) {
		parallel(t)
		l := newLocker(t, h.New(t))
		for _, d := range []time.Duration{-time.Millisecond, dlock.MaxLockDelay + time.Millisecond} {
			_, err := l.Mutex(lockName(t), dlock.WithLockDelay(d)).TryLock(testContext(t))
			var ie *store.InvalidError
			if !errors.As(err, &ie) || ie.Field != "lockDelay" {
				t.Errorf("TryLock with WithLockDelay(%v) = %v, want an *InvalidError for lockDelay", d, err)
			}
		}
	})
}

// A TTL long enough for a first call on a loaded machine (a cluster's
// first call on a name can take hundreds of ms) to come back in time.
const (
	delayTTL  = time.Second
	lockDelay = time.Second
)

// lockDelayGap waits (woken by the store) for name after a hold that began
// at start, and checks that it was not granted before start + TTL + delay.
func lockDelayGap(t *testing.T, s store.Store, name string, start time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testContext(t), waitTimeout)
	defer cancel()
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	m := l.Mutex(name)
	early, err := m.TryLock(ctx)
	switch {
	case err == nil:
		if gap := time.Since(start); gap < delayTTL+lockDelay-clockSlack {
			t.Errorf("TryLock granted %v after a hold of TTL %v with lock-delay %v began; want a refusal until %v", gap, delayTTL, lockDelay, delayTTL+lockDelay)
		}
		early.Release(ctx)
	case errors.Is(err, dlock.ErrLocked):
		var le *dlock.LockedError
		if errors.As(err, &le) && le.RetryAfter <= 0 {
			t.Errorf("refusal during the lock-delay: RetryAfter = %v, want > 0", le.RetryAfter)
		}
	default:
		t.Fatalf("TryLock after the lease ran out = %v", err)
	}
	lease, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the lock-delay = %v", err)
	}
	gap := time.Since(start)
	if gap < delayTTL+lockDelay-clockSlack {
		t.Errorf("name granted again %v after a hold of TTL %v with lock-delay %v began; want at least %v", gap, delayTTL, lockDelay, delayTTL+lockDelay)
	}
	t.Logf("granted again %v after the hold began (TTL %v + lock-delay %v)", gap, delayTTL, lockDelay)
	lease.Release(ctx)
}

// lockDelayExpiry lets a lease run out without renewal.
func lockDelayExpiry(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	l := newLocker(t, s, dlock.WithTTL(delayTTL), dlock.WithLockDelay(lockDelay))
	start := time.Now()
	lease, err := l.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	if !waitClosed(lease.Done()) {
		t.Fatalf("the unrenewed lease did not end within %v", waitTimeout)
	}
	if !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", lease.Err())
	}
	lockDelayGap(t, s, name, start)
}

// lockDelayLoss pauses an auto-renewed holder's renewals until its lease
// is lost: the Locker does not release it, and the name stays held for
// the delay.
func lockDelayLoss(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	ps := &pausingStore{Store: s}
	l := newLocker(t, ps, dlock.WithTTL(delayTTL), dlock.WithLockDelay(lockDelay), dlock.WithAutoRenew())
	ps.pause()
	start := time.Now()
	lease, err := l.Mutex(name).TryLock(ctx)
	if err != nil {
		ps.resume()
		t.Fatalf("TryLock = %v", err)
	}
	closed := waitClosed(lease.Done())
	ps.resume()
	if !closed {
		t.Fatalf("the lease whose renewals stalled did not end within %v", waitTimeout)
	}
	lockDelayGap(t, s, name, start)
}

// lockDelayRelease checks that a clean Release frees the name at once,
// whatever the delay.
func lockDelayRelease(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	l := newLocker(t, s, dlock.WithTTL(delayTTL), dlock.WithLockDelay(dlock.MaxLockDelay))
	lease, err := l.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	mustAcquire(t, s, mutexReq(name, newToken(), longTTL))
}

// lockDelayElection checks the delay on a leader that stops renewing: no
// other candidate is elected before TTL + delay.
func lockDelayElection(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	ps := &pausingStore{Store: s}
	la := newLocker(t, pausingElector{ps, elector(t, s)}, dlock.WithTTL(delayTTL), dlock.WithLockDelay(lockDelay))
	ps.pause()
	start := time.Now()
	a, err := la.Election(name).Campaign(ctx, "a")
	if err != nil {
		ps.resume()
		t.Fatalf("Campaign = %v", err)
	}
	closed := waitClosed(a.Done())
	ps.resume()
	if !closed {
		t.Fatalf("the leader whose renewals stalled kept its lease for %v", waitTimeout)
	}
	lb := newLocker(t, s, dlock.WithTTL(longTTL))
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	b, err := lb.Election(name).Campaign(wctx, "b")
	if err != nil {
		t.Fatalf("Campaign(b) = %v", err)
	}
	if gap := time.Since(start); gap < delayTTL+lockDelay-clockSlack {
		t.Errorf("next leader elected %v after the first began; want at least TTL %v + lock-delay %v", gap, delayTTL, lockDelay)
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("next term %d, want > %d", b.Fence(), a.Fence())
	}
}
