package dlock_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// ttlRecorder is the memory store, recording the TTL of every extension
// with the (virtual) time it reached the store.
type ttlRecorder struct {
	store.Store
	mu   sync.Mutex
	ends []time.Time // when each extension's hold ends
}

func (r *ttlRecorder) Extend(ctx context.Context, reqs []dlock.Request) []error {
	r.mu.Lock()
	for _, req := range reqs {
		r.ends = append(r.ends, time.Now().Add(req.TTL))
	}
	r.mu.Unlock()
	return r.Store.Extend(ctx, reqs)
}

func (r *ttlRecorder) extensions() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.ends...)
}

// waitDone waits for lease to end, at most limit (of virtual time).
func waitDone(t *testing.T, lease *dlock.Lease, limit time.Duration) {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(limit):
		t.Fatalf("lease still held after %v, Err() = %v", limit, lease.Err())
	}
}

// An auto-renewed lease with a max hold is renewed up to the max hold, no
// further: it ends at grant+d at the latest (less the drift margin of its
// last extension), the store's hold ends there too, and the name is free
// for others at once.
func TestMaxHoldEndsAnAutoRenewedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		rec := &ttlRecorder{Store: memory.New()}
		l := newLocker(t, rec, dlock.WithTTL(time.Second), dlock.WithAutoRenew(), dlock.WithMaxHold(2500*time.Millisecond))
		start := time.Now()
		lease, err := l.Mutex("bounded").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		end := start.Add(2500 * time.Millisecond)
		waitDone(t, lease, time.Minute)
		got := time.Since(start)
		if got > 2500*time.Millisecond || got < 2500*time.Millisecond-13*time.Millisecond {
			t.Errorf("lease with max hold 2.5s ended after %v, want in the last drift margin (13ms) before 2.5s", got)
		}
		if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, dlock.ErrMaxHold) {
			t.Errorf("Err() = %v, want ErrLeaseLost and ErrMaxHold", err)
		}
		exts := rec.extensions()
		if len(exts) < 4 {
			t.Errorf("%d extensions before the max hold, want renewals every TTL/3 until it", len(exts))
		}
		for i, e := range exts {
			if e.After(end) {
				t.Errorf("extension %d holds the name on the store until %v after the grant, past the max hold 2.5s", i, e.Sub(start))
			}
		}
		synctest.Wait() // the release behind the loss
		other, err := l.Mutex("bounded").TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock after the max hold = %v, want the name free at once", err)
		}
		other.Release(ctx)
	})
}

// An acquire with a TTL longer than the max hold asks the store for the
// max hold only.
func TestMaxHoldCapsTheAcquireTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memory.New()
		l := newLocker(t, mem, dlock.WithTTL(time.Minute), dlock.WithMaxHold(time.Second))
		start := time.Now()
		lease, err := l.Mutex("short").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := mem.State(ctx, "short"); st.TTL > time.Second {
			t.Errorf("store holds the name for %v, want at most the max hold 1s", st.TTL)
		}
		if ttl := lease.TTL(); ttl > time.Second {
			t.Errorf("TTL() = %v, want at most the max hold 1s", ttl)
		}
		waitDone(t, lease, time.Minute)
		if got := time.Since(start); got > time.Second {
			t.Errorf("lease ended after %v, want by its max hold 1s", got)
		}
		if !errors.Is(lease.Err(), dlock.ErrMaxHold) {
			t.Errorf("Err() = %v, want ErrMaxHold", lease.Err())
		}
	})
}

// Extend cannot take a lease past its max hold: it is capped to what is
// left, and once nothing is left it reports the loss.
func TestExtendCannotPassMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memory.New()
		l := newLocker(t, mem, dlock.WithTTL(time.Second), dlock.WithMaxHold(1500*time.Millisecond))
		start := time.Now()
		lease, err := l.Mutex("capped").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if err := lease.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend(1m) with 1s of max hold left = %v, want nil (capped)", err)
		}
		if ttl := lease.TTL(); ttl > time.Second {
			t.Errorf("TTL() after Extend(1m) = %v, want at most the 1s left of the max hold", ttl)
		}
		if st, _ := mem.State(ctx, "capped"); st.TTL > time.Second {
			t.Errorf("store holds the name for %v after Extend(1m), want at most the 1s left", st.TTL)
		}
		waitDone(t, lease, time.Minute)
		if got := time.Since(start); got > 1500*time.Millisecond {
			t.Errorf("lease ended after %v, want by its max hold 1.5s", got)
		}
		err = lease.Extend(ctx, time.Second)
		if !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, dlock.ErrMaxHold) {
			t.Errorf("Extend after the max hold = %v, want ErrLeaseLost and ErrMaxHold", err)
		}
	})
}

// Do with a max hold cancels fn's context at the max hold, with a cause
// that says so, and returns the loss.
func TestDoWithMaxHoldCancelsFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := newLocker(t, memory.New(), dlock.WithTTL(time.Second))
		start := time.Now()
		err := l.Do(ctx, "hung", func(ctx context.Context) error {
			select {
			case <-ctx.Done(): // a hung holder whose process still renews
			case <-time.After(time.Hour):
				t.Error("fn's ctx not cancelled at the max hold")
			}
			if cause := context.Cause(ctx); !errors.Is(cause, dlock.ErrMaxHold) {
				t.Errorf("fn ctx cause = %v, want ErrMaxHold", cause)
			}
			return context.Cause(ctx)
		}, dlock.WithMaxHold(3*time.Second))
		if !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, dlock.ErrMaxHold) {
			t.Errorf("Do = %v, want ErrLeaseLost and ErrMaxHold", err)
		}
		if got := time.Since(start); got > 3*time.Second {
			t.Errorf("Do's fn was cancelled after %v, want by its max hold 3s", got)
		}
	})
}

// Lease.Context is cancelled when the lease ends, with the loss error or
// ErrReleased as its cause; it carries the lease; a parent that ends first
// cancels it and it is forgotten by the lease.
func TestLeaseContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memory.New()
		l := newLocker(t, mem, dlock.WithTTL(time.Second), dlock.WithAutoRenew())

		released, err := l.Mutex("r").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rctx := released.Context(ctx)
		if got := dlock.LeaseFromContext(rctx, "r"); got != released {
			t.Errorf("LeaseFromContext(lease.Context) = %v, want the lease", got)
		}
		if rctx.Err() != nil {
			t.Fatalf("context of a held lease ended: %v", context.Cause(rctx))
		}
		released.Release(ctx)
		<-rctx.Done()
		if cause := context.Cause(rctx); cause != dlock.ErrReleased {
			t.Errorf("cause after Release = %v, want ErrReleased", cause)
		}
		if late := released.Context(ctx); context.Cause(late) != dlock.ErrReleased {
			t.Errorf("context of a released lease: cause %v, want ErrReleased at once", context.Cause(late))
		}

		lost, err := l.Mutex("l").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lctx := lost.Context(ctx)
		mem.Release(ctx, dlock.Request{Name: "l", Token: lost.Token()}) // the next renewal is refused
		<-lctx.Done()
		if cause := context.Cause(lctx); !errors.Is(cause, dlock.ErrLeaseLost) || cause != lost.Err() {
			t.Errorf("cause after loss = %v, want the loss error %v", cause, lost.Err())
		}

		held, err := l.Mutex("p").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		parent, cancel := context.WithCancelCause(ctx)
		pctx := held.Context(parent)
		if n := dlock.LeaseContexts(held); n != 1 {
			t.Errorf("lease keeps %d contexts, want 1", n)
		}
		why := errors.New("request done")
		cancel(why)
		<-pctx.Done()
		if cause := context.Cause(pctx); cause != why {
			t.Errorf("cause after the parent ended = %v, want the parent's", cause)
		}
		synctest.Wait()
		if n := dlock.LeaseContexts(held); n != 0 {
			t.Errorf("lease keeps %d contexts after their parent ended, want 0", n)
		}
		if held.Err() != nil {
			t.Errorf("the parent's end ended the lease: %v", held.Err())
		}
		held.Release(ctx)
	})
}

// Lease.Context costs no goroutine per context: the lease cancels its
// contexts itself (a goroutine per context would add 1000 here).
func TestLeaseContextCostsNoGoroutine(t *testing.T) {
	ctx := context.Background()
	l := newLocker(t, memory.New(), dlock.WithTTL(time.Minute))
	lease, err := l.Mutex("many").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	ctxs := make([]context.Context, 1000)
	for i := range ctxs {
		ctxs[i] = lease.Context(ctx)
	}
	if grown := runtime.NumGoroutine() - before; grown >= 100 {
		t.Errorf("1000 lease contexts started %d goroutines, want none per context", grown)
	}
	lease.Release(ctx)
	for i, c := range ctxs {
		select {
		case <-c.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("context %d not cancelled by Release", i)
		}
	}
	if n := dlock.LeaseContexts(lease); n != 0 {
		t.Errorf("released lease keeps %d contexts, want 0", n)
	}
}
