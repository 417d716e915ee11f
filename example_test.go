package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

func ExampleMutex_TryLock() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New())
	defer locker.Close()

	lease, err := locker.Mutex("report").TryLock(ctx)
	if err != nil {
		fmt.Println("first:", err)
		return
	}
	defer lease.Release(ctx)

	_, err = locker.Mutex("report").TryLock(ctx)
	var locked *dlock.LockedError
	fmt.Println("second held:", errors.As(err, &locked), errors.Is(err, dlock.ErrLocked))
	// Output: second held: true true
}

func ExampleMutex_Lock() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	locker, _ := dlock.New(memory.New(), dlock.WithTTL(10*time.Second))
	defer locker.Close()

	first, _ := locker.Mutex("job").TryLock(ctx)
	go func() {
		time.Sleep(10 * time.Millisecond)
		first.Release(ctx)
	}()
	second, err := locker.Mutex("job").Lock(ctx) // woken by the release
	if err != nil {
		fmt.Println(err)
		return
	}
	defer second.Release(ctx)
	fmt.Println("fence went up:", second.Fence() > first.Fence())
	// Output: fence went up: true
}

func ExampleLocker_Do() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New(), dlock.WithTTL(time.Second))
	defer locker.Close()

	err := locker.Do(ctx, "nightly-import", func(ctx context.Context) error {
		// ctx is cancelled the moment the lease is lost; the lease is
		// renewed every TTL/3 meanwhile.
		lease := dlock.LeaseFromContext(ctx, "nightly-import")
		fmt.Println("holding, fence > 0:", lease.Fence() > 0)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// holding, fence > 0: true
	// err: <nil>
}

func ExampleLease_Done() {
	ctx := context.Background()
	store := memory.New()
	locker, _ := dlock.New(store, dlock.WithTTL(200*time.Millisecond))
	defer locker.Close()

	lease, _ := locker.Mutex("leader").TryLock(ctx)
	// Someone removes our key (an operator, eviction, a failover).
	store.Release(ctx, dlock.Request{Name: "leader", Token: lease.Token()})
	// The next renewal is refused, and the lease reports it.
	lease.Extend(ctx, 0)
	<-lease.Done()
	fmt.Println(errors.Is(lease.Err(), dlock.ErrLeaseLost))
	// Output: true
}

// fencedStore stands for the protected resource: it refuses writes whose
// fence is lower than the highest it has accepted.
type fencedStore struct {
	highest int64
	value   string
}

func (s *fencedStore) write(fence int64, v string) error {
	if fence < s.highest {
		return fmt.Errorf("stale fence %d < %d", fence, s.highest)
	}
	s.highest, s.value = fence, v
	return nil
}

func Example_fencing() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New(), dlock.WithTTL(100*time.Millisecond))
	defer locker.Close()
	resource := &fencedStore{}

	old, _ := locker.Mutex("account-7").TryLock(ctx)
	<-old.Done() // the old holder pauses past its TTL...

	current, _ := locker.Mutex("account-7").Lock(ctx) // granted once the old lease expires
	fmt.Println("current:", resource.write(current.Fence(), "new"))
	fmt.Println("old rejected:", resource.write(old.Fence(), "stale") != nil)
	current.Release(ctx)
	// Output:
	// current: <nil>
	// old rejected: true
}

// A watchdog with a bound: Do renews the lease while fn runs, but for at most
// the max hold; a fn that hangs has its ctx cancelled then, and the name is
// released for others.
func ExampleWithMaxHold() {
	l, _ := dlock.New(memory.New())
	defer l.Close()
	err := l.Do(context.Background(), "report", func(ctx context.Context) error {
		<-ctx.Done() // a holder that hangs
		return context.Cause(ctx)
	}, dlock.WithTTL(time.Second), dlock.WithMaxHold(300*time.Millisecond))
	fmt.Println(errors.Is(err, dlock.ErrMaxHold), errors.Is(err, dlock.ErrLeaseLost))
	// Output: true true
}

// The lease as a context: cancelled when the lease ends, with the reason
// as its cause.
func ExampleLease_Context() {
	ctx := context.Background()
	l, _ := dlock.New(memory.New())
	defer l.Close()
	lease, _ := l.Mutex("orders").TryLock(ctx)
	lctx := lease.Context(ctx)
	fmt.Println(lctx.Err())
	lease.Release(ctx)
	<-lctx.Done()
	fmt.Println(context.Cause(lctx))
	// Output:
	// <nil>
	// dlock: lease released
}
