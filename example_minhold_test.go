package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// A scheduled job on many replicas: each replica's cron fires every
// minute, and the job must run once per minute. The job takes a moment, so
// a plain lock would be free again long before a replica whose clock is a
// second behind fires; WithMinHold keeps the name held for most of the
// interval after the job's release. Here a "minute" is one second.
func ExampleWithMinHold() {
	ctx := context.Background()
	mem := memory.New() // in production: the store every replica shares
	const minute = time.Second
	var replicas []*dlock.Locker
	for i := range 3 {
		l, _ := dlock.New(mem, dlock.WithHolder(fmt.Sprintf("replica-%d", i+1)))
		defer l.Close()
		replicas = append(replicas, l)
	}
	var runs atomic.Int32
	fire := func(l *dlock.Locker) (ran bool) {
		// A little under the interval, so next minute's fire finds it free.
		lease, err := l.Mutex("nightly-report", dlock.WithMinHold(minute*9/10)).TryLock(ctx)
		if errors.Is(err, dlock.ErrLocked) {
			return false // another replica runs it this minute
		}
		if err != nil {
			panic(err) // the example's store does not fail
		}
		defer lease.Release(ctx) // the name stays held until the min hold ends
		runs.Add(1)              // the job, fenced with lease.Fence()
		return true
	}
	for m := 1; m <= 2; m++ {
		var wg sync.WaitGroup
		for _, l := range replicas {
			wg.Go(func() { fire(l) })
		}
		wg.Wait()
		// A replica that fires late (its clock behind, a retry) after the
		// job finished is still refused.
		late := fire(replicas[0])
		fmt.Printf("minute %d: the job ran %d time(s); a late fire ran it: %v\n", m, runs.Swap(0), late)
		waitFree(ctx, mem, "nightly-report") // the next minute
	}
	// Output:
	// minute 1: the job ran 1 time(s); a late fire ran it: false
	// minute 2: the job ran 1 time(s); a late fire ran it: false
}

// waitFree waits until nobody holds name on mem (at most 10s).
func waitFree(ctx context.Context, mem *memory.Store, name string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st, err := mem.State(ctx, name); err == nil && st.Holders == 0 {
			return
		}
	}
}
