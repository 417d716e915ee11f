package dlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// plainStore hides the optional interfaces of a store (GrantWatcher among
// them), as a store that does not hand over inside the release would be.
type plainStore struct{ store.Store }

// TestFairWithoutGrantWatcher checks that the fair lock keeps arrival order
// and is woken by the store's Watch when the store cannot deliver grants.
func TestFairWithoutGrantWatcher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := plainStore{memory.New()}
	// Retries a minute apart: only the store's wake-ups can serve the
	// waiters within the test's time.
	opts := []dlock.Option{dlock.WithTTL(time.Minute), dlock.WithQueueTTL(time.Minute), dlock.WithBackoff(time.Minute, time.Minute)}
	l, err := dlock.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first, err := l.Fair("f").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range 4 {
		queued := make(chan struct{})
		var once sync.Once
		f := l.Fair("f", dlock.WithQueuePosition(func(pos int) {
			once.Do(func() {
				if pos != i {
					t.Errorf("waiter %d queued at position %d", i, pos)
				}
				close(queued)
			})
		}))
		wg.Go(func() {
			lease, err := f.Lock(ctx)
			if err != nil {
				t.Errorf("waiter %d: Lock = %v", i, err)
				once.Do(func() { close(queued) })
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			lease.Release(ctx)
		})
		<-queued
	}
	first.Release(ctx)
	wg.Wait()
	if want := []int{0, 1, 2, 3}; !slices.Equal(order, want) {
		t.Errorf("served in order %v, want %v", order, want)
	}
}

// TestDowngradeOfEndedLease checks that Downgrade refuses a write lease
// that was released or belongs to another lock, and takes no read lock.
func TestDowngradeOfEndedLease(t *testing.T) {
	ctx := context.Background()
	l, _ := dlock.New(memory.New())
	defer l.Close()
	rw := l.RWMutex("cfg")
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.RWMutex("other").Downgrade(ctx, w); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Downgrade by another lock = %v, want ErrInvalid", err)
	}
	if _, err := rw.TryRLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("TryRLock while written = %v, want ErrLocked", err)
	}
	w.Release(ctx)
	if _, err := rw.Downgrade(ctx, w); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Downgrade of a released lease = %v, want ErrNotHeld", err)
	}
	w2, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the refused downgrade = %v, want the lock free", err)
	}
	w2.Release(ctx)
}

// TestSemaphoreBadLimit checks the limit is validated before any store call.
func TestSemaphoreBadLimit(t *testing.T) {
	l, _ := dlock.New(memory.New())
	defer l.Close()
	for _, n := range []int{0, -3} {
		if _, err := l.Semaphore("s", n).Acquire(context.Background()); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Semaphore(n=%d).Acquire = %v, want ErrInvalid", n, err)
		}
	}
}

// TestLockerDoDoesNotLendOwnership checks that the mutex lease Locker.Do
// puts in ctx does not make a reentrant lock of the same name re-enter:
// only a reentrant lease carries an owner.
func TestLockerDoDoesNotLendOwnership(t *testing.T) {
	ctx := context.Background()
	l, _ := dlock.New(memory.New())
	defer l.Close()
	err := l.Do(ctx, "x", func(ctx context.Context) error {
		_, err := l.Reentrant("x").TryLock(ctx)
		return err
	})
	if !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("reentrant TryLock inside Do of a mutex = %v, want ErrLocked", err)
	}
}
