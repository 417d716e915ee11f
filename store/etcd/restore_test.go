package etcd_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
)

// TestFenceRisesAfterSnapshotRestore: etcd restored from a backup starts
// again from the backup's revision, so a fence that is a revision repeats.
// Grants, a backup of the data directory (the server stopped: what
// `etcdctl snapshot restore` also brings back, revisions included), more
// grants of the mutex, the fair lock and the election, the backup restored;
// the next grant of each pattern on the name must be above every fence
// issued before. The test checks that the restored server's revision is
// below the one of the last grant, so the restore did go back.
func TestFenceRisesAfterSnapshotRestore(t *testing.T) {
	began := time.Now()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const name = "restored"
	grant := func(s *etcd.Store, mode store.Mode, tok string) int64 {
		t.Helper()
		req := store.Request{Name: name, Token: tok, TTL: time.Minute, Mode: mode, Value: tok}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire(%v, %s) = %+v, %v; want a grant", mode, tok, g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release(%v, %s) = %v", mode, tok, err)
		}
		return g.Fence
	}
	revision := func(s *etcd.Store) int64 {
		t.Helper()
		resp, err := s.Client().Get(ctx, "revision-probe")
		if err != nil {
			t.Fatalf("Get = %v", err)
		}
		return resp.Header.Revision
	}
	modes := []store.Mode{store.ModeMutex, store.ModeFair, store.ModeElection}

	s := newStore(t, srv.Endpoint())
	var issued []int64
	for i, m := range modes {
		issued = append(issued, grant(s, m, fmt.Sprintf("before-%d", i)))
	}
	s.Close()

	backup := t.TempDir() + "/data"
	srv.Kill()
	if out, err := exec.Command("cp", "-a", srv.DataDir(), backup).CombinedOutput(); err != nil {
		t.Fatalf("back up the data directory: %v\n%s", err, out)
	}
	srv.Restart(t)

	s = newStore(t, srv.Endpoint())
	for round := range 3 {
		for i, m := range modes {
			issued = append(issued, grant(s, m, fmt.Sprintf("lost-%d-%d", round, i)))
		}
	}
	lastRev := revision(s)
	s.Close()
	top := issued[0]
	for i, f := range issued {
		if i > 0 && f <= issued[i-1] {
			t.Fatalf("fences before the restore = %v: not strictly increasing", issued)
		}
		top = max(top, f)
	}

	srv.Kill()
	if err := os.RemoveAll(srv.DataDir()); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", backup, srv.DataDir()).CombinedOutput(); err != nil {
		t.Fatalf("restore the data directory: %v\n%s", err, out)
	}
	srv.Restart(t)

	s = newStore(t, srv.Endpoint())
	if rev := revision(s); rev >= lastRev {
		t.Fatalf("revision after the restore = %d, want below %d (the last grant's): the restore did not go back, the test tests nothing", rev, lastRev)
	}
	var after []int64
	for i, m := range modes {
		after = append(after, grant(s, m, fmt.Sprintf("after-%d", i)))
	}
	t.Logf("fences before the restore %v; after %v; %v", issued, after, time.Since(began).Round(time.Millisecond))
	for i, f := range after {
		if f <= top {
			t.Errorf("fence of the %v grant after the restore = %d, want above every fence issued before (%d)", modes[i], f, top)
		}
		if i > 0 && f <= after[i-1] {
			t.Errorf("fences after the restore = %v: not strictly increasing", after)
		}
	}
}
