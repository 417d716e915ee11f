package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// TestMultiEventsBalance: every lease a multi-lock takes, undone ones
// included, is reported acquired once and released once, so a gauge of
// held leases (dlockprom) returns to zero.
func TestMultiEventsBalance(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	held := 0
	l, err := dlock.New(memory.New(), dlock.WithObserver(func(ev dlock.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ev.Kind == dlock.EventAcquire && ev.Result == "acquired":
			held++
		case ev.Kind == dlock.EventRelease, ev.Kind == dlock.EventLeaseLost:
			held--
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	blocker, err := l.Mutex("c").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Multi([]string{"a", "b", "c"}).TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock over a held name = %v, want ErrLocked", err)
	}
	blocker.Release(ctx)
	ml, err := l.Multi([]string{"a", "b", "c"}).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ml.Release(ctx)
	mu.Lock()
	defer mu.Unlock()
	if held != 0 {
		t.Errorf("acquired minus released leases = %d, want 0", held)
	}
}
