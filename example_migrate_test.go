package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/fence"
	"github.com/dlock-dev/dlock/store/memory"
)

// Example_migrateFromRedsync is the dlock version of typical redsync code
// (docs/migrating.md has the full table). Before:
//
//	rs := redsync.New(goredis.NewPool(client)) // several pools: Redlock
//	mutex := rs.NewMutex("invoice-42",
//		redsync.WithExpiry(8*time.Second),
//		redsync.WithTries(32),
//		redsync.WithRetryDelay(150*time.Millisecond))
//	if err := mutex.LockContext(ctx); err != nil {
//		return err // redsync.ErrFailed, *redsync.ErrTaken
//	}
//	defer mutex.UnlockContext(ctx)
//	if ok, err := mutex.ExtendContext(ctx); !ok || err != nil {
//		return err // the work took too long
//	}
//	return writeInvoice(ctx) // no fence: a paused holder can still write
//
// After: the wait budget is ctx's deadline instead of tries × delay, the
// waiter is woken by the release, the lease is renewed while the work
// runs, and the resource refuses the writes of a holder whose fence is
// older than one it has seen.
func Example_migrateFromRedsync() {
	ctx := context.Background()
	// In production: valkey.Dial(ctx, "redis://...") for one node, or
	// redlock.New over several stores for redsync.New(pool1, pool2, pool3).
	locker, err := dlock.New(memory.New(), dlock.WithTTL(8*time.Second)) // WithExpiry
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	invoices := &fence.Register[string]{} // the protected resource

	// mutex.TryLockContext(ctx): one attempt, no waiting.
	first, err := locker.Mutex("invoice-42").TryLock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("first holder wrote:", invoices.Write(first.Fence(), "draft"))

	// A second TryLock is refused with the holder's remaining time
	// (redsync: ErrFailed or *ErrTaken, with no time).
	_, err = locker.Mutex("invoice-42").TryLock(ctx)
	var locked *dlock.LockedError
	fmt.Println("second TryLock refused:", errors.As(err, &locked) && locked.RetryAfter > 0)

	// mutex.LockContext(ctx) with WithTries and WithRetryDelay: wait up to
	// a deadline. Do renews the lease while fn runs (no ExtendContext) and
	// cancels fn's ctx if the lease is lost.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- locker.Do(wctx, "invoice-42", func(ctx context.Context) error {
			lease := dlock.LeaseFromContext(ctx, "invoice-42")
			fmt.Println("fence went up:", lease.Fence() > first.Fence())
			return invoices.Write(lease.Fence(), "paid")
		})
	}()
	first.Release(ctx) // mutex.UnlockContext(ctx); it wakes the waiter
	fmt.Println("second holder wrote:", <-done)

	// The first holder, paused past its lease, writes late: refused.
	err = invoices.Write(first.Fence(), "draft again")
	fmt.Println("late write refused:", errors.Is(err, fence.ErrStale))
	value, _ := invoices.Read()
	fmt.Println("value:", value)
	// Output:
	// first holder wrote: <nil>
	// second TryLock refused: true
	// fence went up: true
	// second holder wrote: <nil>
	// late write refused: true
	// value: paid
}

// Example_migrateFromRedislock is the dlock version of typical
// bsm/redislock code (docs/migrating.md has the full table). Before:
//
//	locker := redislock.New(client)
//	backoff := redislock.LimitRetry(redislock.LinearBackoff(100*time.Millisecond), 20)
//	lock, err := locker.Obtain(ctx, "report", 10*time.Second,
//		&redislock.Options{RetryStrategy: backoff})
//	if errors.Is(err, redislock.ErrNotObtained) {
//		return nil // someone else is running it
//	}
//	defer lock.Release(ctx)
//	// a goroutine calls lock.Refresh(ctx, 10*time.Second, nil) every few
//	// seconds and cancels the work when it returns ErrNotObtained
//	ttl, err := lock.TTL(ctx) // a round trip
//
// After: the retry strategy becomes a deadline on ctx (with WithBackoff
// as the fallback between server wake-ups), the refresh goroutine becomes
// WithAutoRenew, lease loss is Done/Err, and every grant has a fence.
func Example_migrateFromRedislock() {
	ctx := context.Background()
	store := memory.New() // in production: valkey.Dial(ctx, "redis://...")
	locker, err := dlock.New(store, dlock.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	report := locker.Mutex("report", dlock.WithAutoRenew(), dlock.WithBackoff(100*time.Millisecond, time.Second))

	// Obtain with LimitRetry(LinearBackoff(100ms), 20): wait about 2s.
	octx, cancel := context.WithTimeout(ctx, 2*time.Second)
	lease, err := report.Lock(octx)
	cancel()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ttl left > 9s:", lease.TTL() > 9*time.Second) // lock.TTL(ctx), without a round trip

	// Obtain while it is held: redislock.ErrNotObtained (joined with the
	// ctx error in recent versions) is dlock.ErrLocked joined with it.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = locker.Mutex("report").Lock(wctx)
	cancel()
	fmt.Println("not obtained:", errors.Is(err, dlock.ErrLocked), errors.Is(err, context.DeadlineExceeded))

	// The protected resource admits writes by fence.
	var guard fence.Guard
	fmt.Println("write admitted:", guard.Admit(lease.Fence()))

	// lock.Refresh(ctx, 20*time.Second, nil)
	fmt.Println("refresh:", lease.Extend(ctx, 20*time.Second))

	// Someone deletes the key (an operator, a failover that lost it):
	// redislock's next Refresh says ErrNotObtained; dlock's next renewal
	// marks the lease lost, closes Done, and Err says why.
	store.Release(ctx, dlock.Request{Name: "report", Token: lease.Token()})
	err = lease.Extend(ctx, 0)
	<-lease.Done()
	fmt.Println("lost:", errors.Is(err, dlock.ErrLeaseLost), errors.Is(lease.Err(), dlock.ErrLeaseLost))

	// A new holder gets a higher fence, and the old one's writes are refused.
	next, err := locker.Mutex("report").TryLock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("new holder admitted:", guard.Admit(next.Fence()))
	fmt.Println("old holder refused:", errors.Is(guard.Admit(lease.Fence()), fence.ErrStale))

	// lock.Release(ctx); a second release is redislock.ErrLockNotHeld,
	// here dlock.ErrNotHeld.
	fmt.Println("release:", next.Release(ctx))
	fmt.Println("released twice:", errors.Is(next.Release(ctx), dlock.ErrNotHeld))
	// Output:
	// ttl left > 9s: true
	// not obtained: true true
	// write admitted: <nil>
	// refresh: <nil>
	// lost: true true
	// new holder admitted: <nil>
	// old holder refused: true
	// release: <nil>
	// released twice: true
}
