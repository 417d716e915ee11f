package dlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// TestAcquireRefusesMarkerTokens: a caller-chosen token shaped like the
// markers the Valkey/Redis stores keep in a name's main key ("dlock:read",
// "dlock:semaphore:3", ...) is refused before the store is asked, naming
// the field, on every store; other tokens are taken.
func TestAcquireRefusesMarkerTokens(t *testing.T) {
	ctx := context.Background()
	l := newLocker(t, memory.New())
	for _, tok := range []string{"dlock:", "dlock:read", "dlock:write", "dlock:reentrant", "dlock:fair", "dlock:election", "dlock:semaphore:3", "dlock:anything"} {
		for _, m := range []dlock.Mode{dlock.ModeMutex, dlock.ModeRead, dlock.ModeSemaphore} {
			ls, err := l.Acquire(ctx, dlock.Request{Name: "marker", Token: tok, Mode: m, Limit: 3}, false)
			var inv *dlock.InvalidError
			if !errors.As(err, &inv) || inv.Field != "token" {
				t.Errorf("Acquire(%v, token %q) = %v; want an *InvalidError naming token", m, tok, err)
			}
			if ls != nil {
				ls.Release(ctx)
			}
		}
	}
	for _, tok := range []string{"DLOCK:read", "xdlock:read", "dlock-read", "0123456789abcdef0123456789abcdef"} {
		ls, err := l.Acquire(ctx, dlock.Request{Name: "marker", Token: tok, Mode: dlock.ModeMutex}, false)
		if err != nil {
			t.Errorf("Acquire(token %q) = %v, want a grant", tok, err)
			continue
		}
		ls.Release(ctx)
	}
}
