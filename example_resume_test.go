package dlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// A process that kept its lease's token (on disk, say) takes the lease back
// after a restart, with its fence, instead of acquiring anew.
func ExampleLocker_Resume() {
	ctx := context.Background()
	mem := memory.New()
	before, _ := dlock.New(mem)
	lease, _ := before.Mutex("migration").TryLock(ctx)
	saved := dlock.Request{Name: lease.Name(), Token: lease.Token(), Mode: lease.Mode()}
	fence := lease.Fence()
	_ = lease.Forget() // the process dies holding it (Forget: no store call)
	before.Close()

	after, _ := dlock.New(mem)
	defer after.Close()
	resumed, err := after.Resume(ctx, saved, dlock.WithAutoRenew())
	fmt.Println("resumed:", err, "same fence:", resumed.Fence() == fence)
	_ = resumed.Release(ctx)

	_, err = after.Resume(ctx, saved)
	fmt.Println("after release:", errors.Is(err, dlock.ErrNotHeld))
	// Output:
	// resumed: <nil> same fence: true
	// after release: true
}

// An operator frees a name whose holder is stuck, without its token; the
// next holder's fence is higher, so the stuck holder's late writes are
// refused by a fenced resource.
func ExampleLocker_ForceRelease() {
	ctx := context.Background()
	mem := memory.New()
	worker, _ := dlock.New(mem, dlock.WithHolder("worker-7"))
	defer worker.Close()
	stuck, _ := worker.Mutex("queue").TryLock(ctx)

	operator, _ := dlock.New(mem)
	defer operator.Close()
	ended, _ := operator.ForceRelease(ctx, "queue")
	fmt.Println("ended:", len(ended), ended[0].Owner)
	next, err := operator.Mutex("queue").TryLock(ctx)
	fmt.Println("next:", err, "fence above:", next.Fence() > stuck.Fence())
	// Output:
	// ended: 1 worker-7
	// next: <nil> fence above: true
}
