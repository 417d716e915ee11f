package memory_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock/internal/memsnap"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// A store put back to an earlier snapshot of its state (as a restart from
// a snapshot would) never issues a fence again: every grant of every
// pattern is max(last + 1, the clock floor), and the clock has moved on by
// the restart's downtime (1ms here). Grants made after the snapshot are
// the ones the restored state forgets.
func TestRestoredSnapshotNeverRepeatsAFence(t *testing.T) {
	modes := []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeWrite, store.ModeFair, store.ModeSemaphore, store.ModeElection}
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New()
		issued := make(map[string]int64)
		grant := func(name string, mode store.Mode, token string) {
			t.Helper()
			req := store.Request{Name: name, Mode: mode, Token: token, Owner: token, TTL: time.Minute, Limit: 2}
			g, err := s.Acquire(ctx, req)
			if err != nil || !g.Acquired {
				t.Fatalf("Acquire(%v %s) = %+v, %v", mode, name, g, err)
			}
			if g.Fence <= issued[name] {
				t.Errorf("Acquire(%v %s) fence %d, want above %d, every fence issued on the name before", mode, name, g.Fence, issued[name])
			}
			issued[name] = max(issued[name], g.Fence)
			if err := s.Release(ctx, req); err != nil {
				t.Fatalf("Release(%v %s) = %v", mode, name, err)
			}
		}
		for _, m := range modes {
			grant(m.String(), m, "before")
		}
		snap := memsnap.Take(s)
		for i := range 3 {
			for _, m := range modes {
				grant(m.String(), m, fmt.Sprintf("after-%d", i))
			}
		}
		time.Sleep(time.Millisecond) // the restart's downtime
		memsnap.Restore(s, snap)
		for _, m := range modes {
			grant(m.String(), m, "restored")
		}
	})
}
