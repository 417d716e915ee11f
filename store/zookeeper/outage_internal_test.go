package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// TestDeleteDuringOutageIsRetried: a hold whose TTL lapses while the client
// is cut off from the ensemble (here the server is down; the session
// outlives the outage) is deleted once the client is back. The reaper's
// delete failed with "zk: could not connect to a server" and was dropped,
// so the node stayed and held the lock for as long as the session lived:
// e2e/faults T32e, where the worker on the minority side of a partition
// was refused its own lock, whose release the partition had failed, for
// 40 s after the heal.
func TestDeleteDuringOutageIsRetried(t *testing.T) {
	srv := zktest.Start(t)
	open := func() *Store {
		s, err := New(t.Context(), []string{srv.Addr()}, WithSessionTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	ctx := context.Background()
	req := store.Request{Name: "outage", Token: "a1", TTL: time.Second, Mode: store.ModeMutex}
	if g, err := a.Acquire(ctx, req); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	kind, _ := kindOf(req.Mode)
	dir := a.dir(kind, req.Name)
	es, err := a.list(dir)
	if err != nil || len(es) != 1 {
		t.Fatalf("list = %v, %v", es, err)
	}
	path := dir + "/" + es[0].name
	srv.Kill()
	// The reaper lapses the node at its deadline, then deletes it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a.mu.Lock()
		_, dead := a.dead[path]
		a.mu.Unlock()
		if dead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reaper did not lapse the hold within 10s of its 1s TTL")
		}
	}
	// The client fails its unsent requests together, in order, when no
	// server answers: once the second of these has failed, the reaper's
	// delete, sent before it, has failed too.
	for range 2 {
		if _, _, err := a.conn.Exists("/"); err == nil {
			t.Fatal("Exists with the server down succeeded")
		}
	}
	srv.Restart(t)
	breq := store.Request{Name: "outage", Token: "b1", TTL: time.Second, Mode: store.ModeMutex}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		g, err := b.Acquire(ctx, breq)
		if err == nil && g.Acquired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the outage Acquire = %+v, %v, want a grant: the hold that lapsed during it outlived its 1s TTL", g, err)
		}
	}
	if err := b.Release(ctx, breq); err != nil {
		t.Errorf("Release = %v", err)
	}
}
