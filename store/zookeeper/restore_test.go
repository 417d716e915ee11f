package zookeeper_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// TestFenceRisesAfterRestore: a ZooKeeper server restored from a backup of
// its data directory (snapshots and transaction log) continues from the
// backup's zxids and the backup's fence child (docs/safety.md, "Fences
// through a restore or a failover, store by store"). Fences were czxids
// until now, and the grants after the backup had theirs issued again (fence
// 0xb twice on main 17e80db). Now every grant issues max(last + 1, clock
// floor): the test checks that the restore brought the name's last fence
// back stale (a counter alone would issue a fence already issued), and
// that the next grant of every pattern is above every fence issued.
func TestFenceRisesAfterRestore(t *testing.T) {
	began := time.Now()
	srv := zktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	const name = "restored"
	modes := []store.Mode{store.ModeMutex, store.ModeFair, store.ModeElection, store.ModeSemaphore, store.ModeWrite, store.ModeReentrant}
	// grant takes name in mode m and releases it. It polls (bounded by
	// ctx) while the name is held: a restored server may bring back holds
	// until their sessions expire.
	grant := func(s *zookeeper.Store, m store.Mode, tok string) int64 {
		t.Helper()
		req := store.Request{Name: name, Token: tok, TTL: 10 * time.Second, Mode: m, Limit: 2, Value: tok}
		for {
			g, err := s.Acquire(ctx, req)
			if err != nil {
				t.Fatalf("Acquire(%v, %s) = %v", m, tok, err)
			}
			if g.Acquired {
				if m == store.ModeElection {
					if ld, err := s.Leader(ctx, name); err != nil || ld.Term != g.Fence || ld.Value != tok {
						t.Errorf("Leader = %+v, %v; want %s with term %#x (its fence)", ld, err, tok, g.Fence)
					}
				}
				if err := s.Release(ctx, req); err != nil {
					t.Fatalf("Release(%v, %s) = %v", m, tok, err)
				}
				return g.Fence
			}
			select {
			case <-ctx.Done():
				t.Fatalf("Acquire(%v, %s) still refused: %+v", m, tok, g)
			case <-time.After(min(max(g.RetryAfter, 10*time.Millisecond), 200*time.Millisecond)):
			}
		}
	}
	// last reads the name's last fence as the store keeps it (its fence
	// child; an error before the store kept one).
	last := func(s *zookeeper.Store) (int64, error) {
		b, _, err := s.Conn().Get(zookeeper.DefaultRoot + "/x/n" + base64.RawURLEncoding.EncodeToString([]byte(name)) + "/fence")
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(string(b), 10, 64)
	}
	cp := func(from, to string) {
		t.Helper()
		if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
			t.Fatalf("cp -a %s %s: %v\n%s", from, to, err, out)
		}
	}

	issued := map[int64]string{}
	var top int64
	note := func(f int64, what string) {
		t.Helper()
		if w, ok := issued[f]; ok {
			t.Errorf("fence %#x issued twice: %s, then %s", f, w, what)
		}
		issued[f] = what
		top = max(top, f)
	}

	s := newStore(t, srv.Addr())
	for _, m := range modes {
		note(grant(s, m, "before-"+m.String()), m.String()+" before the backup")
	}
	backedUp, backedErr := last(s)
	s.Close()
	backup := t.TempDir() + "/data"
	srv.Kill()
	cp(srv.DataDir(), backup)
	srv.Restart(t)

	s = newStore(t, srv.Addr())
	for i := range 3 {
		for _, m := range modes {
			note(grant(s, m, fmt.Sprintf("lost-%v-%d", m, i)), fmt.Sprintf("%v after the backup (round %d)", m, i))
		}
	}
	s.Close()

	srv.Kill()
	if err := os.RemoveAll(srv.DataDir()); err != nil {
		t.Fatal(err)
	}
	cp(backup, srv.DataDir())
	srv.Restart(t)

	s = newStore(t, srv.Addr())
	restored, restoredErr := last(s)
	before, prev := top, top
	for _, m := range modes {
		f := grant(s, m, "after-"+m.String())
		if f <= prev {
			t.Errorf("%v grant after the restore: fence %#x, want above %#x (every fence issued before, and the grant before it)", m, f, prev)
		}
		prev = max(prev, f)
		note(f, m.String()+" after the restore")
	}
	// The restore did bring the name's state back stale: a counter alone
	// (last + 1, no clock floor) would have issued a fence already issued.
	if backedErr != nil || restoredErr != nil || restored != backedUp || restored+1 > before {
		t.Errorf("fence child at the backup %#x (%v), after the restore %#x (%v); want the backup's, with last + 1 = %#x not above %#x (the restore brought it back stale)",
			backedUp, backedErr, restored, restoredErr, restored+1, before)
	}
	t.Logf("fences: last %#x at the backup, %#x before the restore, %d grants, %v", backedUp, before, len(issued), time.Since(began).Round(time.Millisecond))
}
