package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// TestErrorsAcrossPackages: an error a store returns matches the root's
// name for it, with errors.Is and errors.As, as a user's code expects.
func TestErrorsAcrossPackages(t *testing.T) {
	pairs := []struct{ root, store error }{
		{dlock.ErrNotHeld, store.ErrNotHeld},
		{dlock.ErrUnavailable, store.ErrUnavailable},
		{dlock.ErrNoQuorum, store.ErrNoQuorum},
		{dlock.ErrNotSupported, store.ErrNotSupported},
		{dlock.ErrInvalid, store.ErrInvalid},
		{dlock.ErrClosed, store.ErrClosed},
		{dlock.ErrNoLeader, store.ErrNoLeader},
		{dlock.ErrUpgrade, store.ErrUpgrade},
	}
	for _, p := range pairs {
		if err := fmt.Errorf("op: %w", p.store); !errors.Is(err, p.root) {
			t.Errorf("errors.Is(%v, dlock's %v) = false, want true", err, p.root)
		}
	}
	var se *dlock.StoreError
	if err := fmt.Errorf("op: %w", &store.StoreError{Op: "acquire", Node: -1, Err: errors.New("down")}); !errors.As(err, &se) || se.Op != "acquire" {
		t.Errorf("errors.As(%v, *dlock.StoreError) = false, want the store's error", err)
	}
	var le *dlock.LimitError
	if err := error(&store.LimitError{Name: "s", Held: 1, Asked: 2}); !errors.As(err, &le) || le.Held != 1 {
		t.Errorf("errors.As(%v, *dlock.LimitError) = false, want the store's error", err)
	}
	var m dlock.Mode = store.ModeRead //nolint:staticcheck // ST1023: the explicit type is the point: store.ModeRead must be a dlock.Mode
	if m != dlock.ModeRead || !m.Shared() {
		t.Errorf("store.ModeRead as a dlock.Mode = %v, want dlock.ModeRead", m)
	}
}

// TestLockedErrorRoundsRetryAfter: the error string rounds RetryAfter to the
// millisecond (stores count in milliseconds), while the field stays exact.
func TestLockedErrorRoundsRetryAfter(t *testing.T) {
	tests := []struct {
		retry time.Duration
		want  string
	}{
		{4999998418 * time.Nanosecond, "5s"},
		{1234567 * time.Microsecond, "1.235s"},
		{1500 * time.Microsecond, "2ms"},
		{0, "0s"},
	}
	for _, tt := range tests {
		err := &dlock.LockedError{Name: "n", RetryAfter: tt.retry, Held: dlock.ModeMutex}
		want := fmt.Sprintf("dlock: lock %q held by a mutex hold (retry after %s)", "n", tt.want)
		if got := err.Error(); got != want {
			t.Errorf("LockedError{RetryAfter: %v}.Error() = %q, want %q", tt.retry, got, want)
		}
	}
}

// TestTryLockErrorString: what a refused TryLock prints, through a real
// store: the time left is counted by the store's clock, so it is rarely a
// whole number of milliseconds, and the string must not show the nanoseconds.
func TestTryLockErrorString(t *testing.T) {
	l := newLocker(t, memory.New(), dlock.WithTTL(5*time.Second))
	ctx := context.Background()
	lease, err := l.Mutex("errors-string").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v, want nil", err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	_, err = l.Mutex("errors-string").TryLock(ctx)
	var le *dlock.LockedError
	if !errors.As(err, &le) {
		t.Fatalf("second TryLock = %v, want a *dlock.LockedError", err)
	}
	re := regexp.MustCompile(`\(retry after (\d+(\.\d{1,3})?(s|ms)|0s)\)$`)
	if !re.MatchString(err.Error()) {
		t.Errorf("second TryLock error = %q, want the retry after rounded to the millisecond", err)
	}
}
