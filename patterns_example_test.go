package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

func ExampleReentrant() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New())
	defer locker.Close()
	orders := locker.Reentrant("order-42")

	var updateInventory func(ctx context.Context) error
	processOrder := func(ctx context.Context) error {
		return orders.Do(ctx, func(ctx context.Context) error {
			outer := dlock.LeaseFromContext(ctx, "order-42")
			fmt.Println("processOrder holds, count", outer.Count())
			return updateInventory(ctx) // re-enters: ctx carries the lease
		})
	}
	updateInventory = func(ctx context.Context) error {
		inner, err := orders.Lock(ctx)
		if err != nil {
			return err
		}
		defer inner.Release(ctx)
		outer := dlock.LeaseFromContext(ctx, "order-42")
		fmt.Println("updateInventory re-entered, count", inner.Count(), "same fence", inner.Fence() == outer.Fence())
		return nil
	}
	if err := processOrder(ctx); err != nil {
		fmt.Println(err)
	}

	// Another caller (a context without the lease) is shut out meanwhile.
	held, _ := orders.TryLock(ctx)
	_, err := orders.TryLock(context.Background())
	fmt.Println("stranger:", errors.Is(err, dlock.ErrLocked))
	held.Release(ctx)
	// Output:
	// processOrder holds, count 1
	// updateInventory re-entered, count 2 same fence true
	// stranger: true
}

func ExampleReentrant_withOwner() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New())
	defer locker.Close()

	// Two handles with the same owner ID (say, two requests of one job over
	// the HTTP API) re-enter; each acquisition is released once.
	a, _ := locker.Reentrant("job", dlock.WithOwner("job-7")).TryLock(ctx)
	b, _ := locker.Reentrant("job", dlock.WithOwner("job-7")).TryLock(ctx)
	fmt.Println("counts:", a.Count(), b.Count())
	_, err := locker.Reentrant("job", dlock.WithOwner("job-8")).TryLock(ctx)
	fmt.Println("other owner locked out:", errors.Is(err, dlock.ErrLocked))
	b.Release(ctx)
	fmt.Println("release twice:", b.Release(ctx))
	a.Release(ctx)
	c, err := locker.Reentrant("job", dlock.WithOwner("job-8")).TryLock(ctx)
	fmt.Println("free after the last release:", err == nil, c.Fence() > a.Fence())
	c.Release(ctx)
	// Output:
	// counts: 1 2
	// other owner locked out: true
	// release twice: dlock: lock not held
	// free after the last release: true true
}

func ExampleRWMutex() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New())
	defer locker.Close()
	cfg := locker.RWMutex("config")

	r1, _ := cfg.RLock(ctx)
	r2, _ := cfg.RLock(ctx)
	fmt.Println("two readers share the fence:", r1.Fence() == r2.Fence())

	_, err := cfg.TryLock(ctx)
	fmt.Println("writer while reading:", errors.Is(err, dlock.ErrLocked))
	r1.Release(ctx)
	r2.Release(ctx)

	w, _ := cfg.Lock(ctx)
	fmt.Println("writer gets a new fence:", w.Fence() > r1.Fence())
	_, err = cfg.TryRLock(ctx)
	fmt.Println("reader while writing:", errors.Is(err, dlock.ErrLocked))

	r3, _ := cfg.Downgrade(ctx, w) // no other writer can slip in
	fmt.Println("downgraded reader sees the write's fence:", r3.Fence() == w.Fence())
	r4, err := cfg.TryRLock(ctx)
	fmt.Println("readers enter again:", err == nil)
	r3.Release(ctx)
	r4.Release(ctx)
	// Output:
	// two readers share the fence: true
	// writer while reading: true
	// writer gets a new fence: true
	// reader while writing: true
	// downgraded reader sees the write's fence: true
	// readers enter again: true
}

func ExampleRWMutex_Lock_upgrade() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New())
	defer locker.Close()
	cfg := locker.RWMutex("config")

	r, _ := cfg.RLock(ctx)
	defer r.Release(ctx)
	// Taking the write lock while holding the read lock would wait for
	// ourselves forever; it fails at once instead.
	_, err := cfg.Lock(dlock.ContextWithLease(ctx, r))
	fmt.Println(err)
	// Output: dlock: read-to-write upgrade not supported
}

func ExampleFair() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New(), dlock.WithTTL(10*time.Second))
	defer locker.Close()
	printer := locker.Fair("printer")

	first, _ := printer.Lock(ctx)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		order []string
	)
	for _, who := range []string{"ann", "bob", "cid"} {
		queued := make(chan struct{})
		wg.Go(func() {
			lease, err := locker.Fair("printer", dlock.WithQueuePosition(func(int) {
				select {
				case <-queued:
				default:
					close(queued) // in the queue
				}
			})).Lock(ctx)
			if err != nil {
				fmt.Println(err)
				return
			}
			mu.Lock()
			order = append(order, who)
			mu.Unlock()
			lease.Release(ctx) // hands the lock to the next in line
		})
		<-queued // each joins the queue before the next arrives
	}
	first.Release(ctx)
	wg.Wait()
	fmt.Println(order)
	// Output: [ann bob cid]
}

func ExampleSemaphore() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New())
	defer locker.Close()
	downloads := locker.Semaphore("downloads", 2)

	a, _ := downloads.TryAcquire(ctx)
	b, _ := downloads.TryAcquire(ctx)
	_, err := downloads.TryAcquire(ctx)
	fmt.Println("third permit:", errors.Is(err, dlock.ErrLocked))
	fmt.Println("every permit has its own fence:", b.Fence() > a.Fence())

	a.Release(ctx)
	c, err := downloads.Acquire(ctx)
	fmt.Println("after a release:", err == nil)
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// third permit: true
	// every permit has its own fence: true
	// after a release: true
}
