package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// A lease of WithOwnerReleaseOnly that the Locker counts lost (its
// validity passed unrenewed) or stops watching (Close) keeps its hold on
// the store: its owner can still extend and release it by its token, and
// nobody else gets the name meanwhile. Without the option the Locker
// releases it in both cases.
func TestOwnerReleaseOnlyKeepsTheStoreHold(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, l *dlock.Locker, lease *dlock.Lease)
		want error // what the lease's Err wraps
	}{
		{"lost", func(t *testing.T, _ *dlock.Locker, lease *dlock.Lease) {
			// The local validity (TTL less a drift margin of 30%) passes
			// well before the store's hold ends.
			waitDone(t, lease, time.Minute)
		}, dlock.ErrLeaseLost},
		{"closed", func(t *testing.T, l *dlock.Locker, _ *dlock.Lease) {
			if err := l.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
		}, dlock.ErrClosed},
	} {
		for _, kept := range []bool{false, true} {
			name := tc.name + map[bool]string{false: "/default", true: "/WithOwnerReleaseOnly"}[kept]
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := context.Background()
					mem := memory.New()
					opts := []dlock.Option{dlock.WithTTL(time.Second), dlock.WithDriftFactor(0.3)}
					if kept {
						opts = append(opts, dlock.WithOwnerReleaseOnly())
					}
					l := newLocker(t, mem, opts...)
					lease, err := l.Mutex("kept").TryLock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					tc.end(t, l, lease)
					synctest.Wait() // a release behind has run by now
					if err := lease.Err(); !errors.Is(err, tc.want) {
						t.Errorf("Err() = %v, want %v", err, tc.want)
					}
					st, err := mem.State(ctx, "kept")
					if err != nil {
						t.Fatal(err)
					}
					if held := st.Holders > 0; held != kept {
						t.Fatalf("store holds the name: %v (%d holders), want %v", held, st.Holders, kept)
					}
					if !kept {
						return
					}
					other := newLocker(t, mem)
					if _, err := other.Mutex("kept").TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
						t.Errorf("TryLock by another Locker = %v, want ErrLocked", err)
					}
					req := store.Request{Name: "kept", Token: lease.Token(), Mode: dlock.ModeMutex, TTL: time.Second}
					if err := mem.Extend(ctx, []store.Request{req})[0]; err != nil {
						t.Errorf("owner's Extend by token = %v, want the hold extended", err)
					}
					if err := mem.Release(ctx, req); err != nil {
						t.Errorf("owner's Release by token = %v, want the hold released", err)
					}
				})
			})
		}
	}
}

// Forget ends a lease for its Locker, reported as released, and leaves the
// store's hold to the owner: the name stays held by the token.
func TestForgetLeavesTheStoreHold(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	var released atomic.Int32
	l := newLocker(t, mem, dlock.WithOwnerReleaseOnly(), dlock.WithObserver(func(ev dlock.Event) {
		if ev.Kind == dlock.EventRelease && ev.Err == nil {
			released.Add(1)
		}
	}))
	lease, err := l.Mutex("forgotten").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Forget(); err != nil {
		t.Fatalf("Forget() = %v, want nil", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Error("Done() not closed after Forget")
	}
	if err := lease.Err(); err != nil {
		t.Errorf("Err() = %v after Forget, want nil", err)
	}
	if n := released.Load(); n != 1 {
		t.Errorf("%d EventRelease after Forget, want 1", n)
	}
	if err := lease.Forget(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Forget() = %v, want ErrNotHeld", err)
	}
	if st, err := mem.State(ctx, "forgotten"); err != nil || st.Holders != 1 {
		t.Errorf("State = %+v, %v; want the hold kept for its owner", st, err)
	}
	req := store.Request{Name: "forgotten", Token: lease.Token(), Mode: dlock.ModeMutex}
	if err := mem.Release(ctx, req); err != nil {
		t.Errorf("owner's Release by token = %v, want the hold released", err)
	}
}
