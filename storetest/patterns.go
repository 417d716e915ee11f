package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// Helpers shared by the suites of the reentrant, read-write, fair and
// semaphore patterns (patterns_*.go).

func init() {
	registerRestart(store.ModeReentrant, func(t *testing.T, s store.Store, name string) int64 {
		return grantOnce(t, s, store.Request{Name: name, Mode: store.ModeReentrant, Owner: newToken()})
	})
	registerRestart(store.ModeWrite, func(t *testing.T, s store.Store, name string) int64 {
		return grantOnce(t, s, store.Request{Name: name, Mode: store.ModeWrite})
	})
	registerRestart(store.ModeFair, func(t *testing.T, s store.Store, name string) int64 {
		return grantOnce(t, s, store.Request{Name: name, Mode: store.ModeFair})
	})
	registerRestart(store.ModeSemaphore, func(t *testing.T, s store.Store, name string) int64 {
		return grantOnce(t, s, store.Request{Name: name, Mode: store.ModeSemaphore, Limit: 1})
	})
}

// grantOnce takes and gives back one hold of req with a fresh token and
// returns its fence.
func grantOnce(t *testing.T, s store.Store, req store.Request) int64 {
	t.Helper()
	req.Token, req.TTL = newToken(), 10*time.Second
	g := mustAcquire(t, s, req)
	if err := s.Release(testContext(t), req); err != nil {
		t.Fatalf("Release(%q, mode %v) = %v, want nil", req.Name, req.Mode, err)
	}
	return g.Fence
}

// mustRelease releases req and fails t unless the store released it.
func mustRelease(t *testing.T, s store.Store, req store.Request) {
	t.Helper()
	if err := s.Release(testContext(t), req); err != nil {
		t.Fatalf("Release(%q, mode %v) = %v, want nil", req.Name, req.Mode, err)
	}
}

// mustNotHold checks that Release and Extend of req report ErrNotHeld.
func mustNotHold(t *testing.T, s store.Store, req store.Request, why string) {
	t.Helper()
	ctx := testContext(t)
	if err := s.Extend(ctx, []store.Request{req})[0]; !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Extend (%s) = %v, want ErrNotHeld", why, err)
	}
	if err := s.Release(ctx, req); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release (%s) = %v, want ErrNotHeld", why, err)
	}
}

// acquireWatching calls Acquire for req until it is granted, waiting
// between refusals for a wake-up from wake or a short random delay (for
// stores that wake only some watchers). It returns an error for a store
// failure or when ctx ends.
func acquireWatching(ctx context.Context, s store.Store, req store.Request, wake <-chan struct{}) (store.Grant, error) {
	for {
		g, err := s.Acquire(ctx, req)
		if err != nil {
			return g, fmt.Errorf("Acquire(%q, mode %v) = %v", req.Name, req.Mode, err)
		}
		if g.Acquired {
			return g, nil
		}
		timer := time.NewTimer(time.Duration(1+rand.IntN(4)) * time.Millisecond)
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return g, ctx.Err()
		}
		timer.Stop()
	}
}

// sleepUntil waits until t: for properties about time itself (a TTL has
// run out by the store's clock), never for synchronisation.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// errs collects the errors of worker goroutines.
type errs struct {
	mu   sync.Mutex
	errs []error
}

func (e *errs) add(err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
}

func (e *errs) report(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, err := range e.errs {
		if i == 10 {
			t.Errorf("... and %d more errors", len(e.errs)-10)
			break
		}
		t.Error(err)
	}
}

// checkListed checks that List has an entry for name equal to want (the
// TTL aside, which moves).
func checkListed(t *testing.T, in store.Inspector, want store.State) {
	t.Helper()
	list, err := in.List(testContext(t))
	if err != nil {
		t.Fatalf("List = %v", err)
	}
	for _, st := range list {
		if st.Name == want.Name {
			st.TTL, want.TTL = 0, 0
			if !sameState(st, want) {
				t.Errorf("List entry for %q = %+v, want %+v (as State says)", want.Name, st, want)
			}
			return
		}
	}
	t.Errorf("List (%d locks) has no entry for %q, a %v lock with %d holders and %d waiters", len(list), want.Name, want.Mode, want.Holders, want.Queue)
}

// sameState reports whether a and b are equal, their Owners in any order
// (see sameHolders).
func sameState(a, b store.State) bool {
	return a.Name == b.Name && a.Mode == b.Mode && a.Holders == b.Holders && a.TTL == b.TTL && a.Fence == b.Fence &&
		a.Queue == b.Queue && a.Limit == b.Limit && sameHolders(a.Owners, b.Owners)
}

// checkWoken checks that a waiter is woken by the store: wait runs on a
// Locker whose backoff and queue refresh are a minute and whose holder's
// lease is longer than waitTimeout, so the waiter gets the lock within
// waitTimeout after release only if the store wakes it (or, rarely, a
// random backoff happens to be short). queued must return once the waiter
// has asked and been refused.
func checkWoken(t *testing.T, s store.Store, wait func(ctx context.Context, l *dlock.Locker) (*dlock.Lease, error),
	queued func(), release func() error) *dlock.Lease {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	l := newLocker(t, s, dlock.WithTTL(longTTL), dlock.WithBackoff(time.Minute, time.Minute), dlock.WithQueueTTL(time.Minute))
	type result struct {
		lease *dlock.Lease
		err   error
		at    time.Time
	}
	done := make(chan result, 1)
	go func() {
		lease, err := wait(ctx, l)
		done <- result{lease, err, time.Now()}
	}()
	queued()
	released := time.Now()
	if err := release(); err != nil {
		t.Fatalf("release of the holder = %v", err)
	}
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("waiter = %v, want a lease after the holder's release", r.err)
		}
		t.Logf("waiter got the lock %v after the release call", r.at.Sub(released))
		return r.lease
	case <-timer.C:
		cancel()
		<-done
		t.Fatalf("waiter not woken within %v of the release (its own retries are a minute apart)", waitTimeout)
		return nil
	}
}

// peerStore returns another store from h on the same backend as s, so that
// what it does reaches s only through the backend (a release on it wakes
// the waiters of s only if the backend pushes the wake-up). When h.New
// makes independent backends (an in-process store), it returns s.
func peerStore(t *testing.T, h Harness, s store.Store) store.Store {
	t.Helper()
	ctx := testContext(t)
	other := h.New(t)
	name := lockName(t)
	held := mutexReq(name, newToken(), longTTL)
	mustAcquire(t, other, held)
	probe := mutexReq(name, newToken(), longTTL)
	g, err := s.Acquire(ctx, probe)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", name, err)
	}
	other.Release(ctx, held)
	if g.Acquired {
		s.Release(ctx, probe)
		return s
	}
	return other
}
