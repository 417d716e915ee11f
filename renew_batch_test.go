package dlock_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// batchStore records the size of every Extend call.
type batchStore struct {
	store.Store
	mu      sync.Mutex
	largest int
	renewed int
}

func (b *batchStore) Extend(ctx context.Context, reqs []dlock.Request) []error {
	b.mu.Lock()
	b.largest = max(b.largest, len(reqs))
	b.renewed += len(reqs)
	b.mu.Unlock()
	return b.Store.Extend(ctx, reqs)
}

// TestRenewalBatchesAreCapped: leases that come due together are renewed
// in Extend calls of at most MaxRenewBatch leases each (one call carried
// every lease due before: 347 544 leases in one call, which timed out whole,
// at a million leases in the bench), and every lease is renewed.
func TestRenewalBatchesAreCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		bs := &batchStore{Store: memory.New()}
		l := newLocker(t, bs, dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
		n := 2*dlock.MaxRenewBatch + 7
		leases := make([]*dlock.Lease, n)
		for i := range n {
			ls, err := l.Mutex("b" + strconv.Itoa(i)).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			leases[i] = ls
		}
		time.Sleep(1100 * time.Millisecond) // one renew interval (TTL/3) and a bit
		synctest.Wait()
		bs.mu.Lock()
		largest, renewed := bs.largest, bs.renewed
		bs.mu.Unlock()
		if largest > dlock.MaxRenewBatch || renewed != n {
			t.Errorf("after one interval: %d renewals, largest Extend call %d; want %d renewals in calls of at most %d", renewed, largest, n, dlock.MaxRenewBatch)
		}
		for _, ls := range leases {
			select {
			case <-ls.Done():
				t.Fatalf("lease %s lost: %v", ls.Name(), ls.Err())
			default:
			}
		}
	})
}
