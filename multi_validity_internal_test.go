package dlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// TestMultiLeaseValidityIsTruth: past its validity a MultiLease is lost for
// Err and Done whether or not the scheduler has noticed, as a Lease is:
// with the scheduler held up, a second Multi holds both names while the
// first must not say Err nil and Done open.
func TestMultiLeaseValidityIsTruth(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		t.Run(map[bool]string{true: "atomic", false: "by name"}[atomic], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { multiPastValidity(t, atomic) })
		})
	}
}

func multiPastValidity(t *testing.T, atomic bool) {
	ctx := context.Background()
	var st store.Store = memory.New()
	if atomic {
		st = oneStepMulti{st}
	}
	first, err := New(st, WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := New(st, WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	names := []string{"mv-a", "mv-b"}
	ml, err := first.Multi(names).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Multi(names).Atomic(); got != atomic {
		t.Fatalf("Atomic() = %v, want %v", got, atomic)
	}
	done := ml.Done()
	HoldScheduler(first)
	time.Sleep(2 * time.Second) // the bubble's clock: past the 1s TTL
	other, err := second.Multi(names).TryLock(ctx)
	if err != nil {
		t.Fatalf("second TryLock(%v) = %v, want both names free past the first's TTL", names, err)
	}
	if err := ml.Err(); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("first Err() = %v while a second Multi holds %v, want ErrLeaseLost", err, names)
	}
	for what, ch := range map[string]<-chan struct{}{"Done() asked before": done, "Done() asked now": ml.Done()} {
		select {
		case <-ch:
		default:
			t.Errorf("first %s is open while a second Multi holds %v, want closed", what, names)
		}
	}
	if got := ml.TTL(); got != 0 {
		t.Errorf("first TTL() = %v past its validity, want 0", got)
	}
	if err := ml.Release(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("first Release() = %v past its validity, want ErrLeaseLost", err)
	}
	if err := other.Extend(ctx, 0); err != nil {
		t.Errorf("second Extend() after the first's Release = %v, want nil (its names kept)", err)
	}
}

// oneStepMulti is a store that takes several names in one operation: a
// stand-in for Valkey's scripts, built from single operations of a store
// whose calls are not interleaved with others' in these tests.
type oneStepMulti struct{ store.Store }

func (s oneStepMulti) AtomicMulti([]string) bool { return true }

func (s oneStepMulti) AcquireMulti(ctx context.Context, reqs []Request) (store.MultiGrant, error) {
	mg := store.MultiGrant{Acquired: true}
	for i, req := range reqs {
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			s.ReleaseMulti(ctx, reqs[:i])
			return store.MultiGrant{Refused: i, Refusal: g}, err
		}
		mg.Fences = append(mg.Fences, g.Fence)
	}
	return mg, nil
}

func (s oneStepMulti) ExtendMulti(ctx context.Context, reqs []Request) []error {
	return s.Extend(ctx, reqs)
}

func (s oneStepMulti) ReleaseMulti(ctx context.Context, reqs []Request) []error {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = s.Release(ctx, req)
	}
	return errs
}
