package dlock_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
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
