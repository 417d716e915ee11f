package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/redlock"
)

// wantNoQuorum fails t unless g, err is a failed acquire for lack of
// quorum.
func wantNoQuorum(t *testing.T, what string, g store.Grant, err error) {
	t.Helper()
	var qe *redlock.QuorumError
	if g.Acquired || !errors.Is(err, store.ErrNoQuorum) || !errors.As(err, &qe) {
		t.Fatalf("%s with 2 of 3 nodes dead = %+v, %v; want a *QuorumError", what, g, err)
	}
}

// noKeys fails t if a live node of c (those not in dead) has key.
func noKeys(t *testing.T, c *cluster, dead []int, key string) {
	t.Helper()
	for i, srv := range c.srvs {
		if i == dead[0] || i == dead[1] {
			continue
		}
		v, err := srv.Do("EXISTS", key)
		if err != nil {
			t.Fatalf("node %d: EXISTS %s = %v", i, key, err)
		}
		if v != "0" {
			t.Errorf("node %d: EXISTS %s = %s after a failed acquire; want 0", i, key, v)
		}
	}
}

// restartAndAcquire restarts the dead nodes and waits until req is granted
// (valkey-go reconnects in the background), then releases it.
func restartAndAcquire(t *testing.T, c *cluster, s *redlock.Store, dead []int, req store.Request) {
	t.Helper()
	for _, i := range dead {
		c.srvs[i].Restart(t)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, err := s.Acquire(t.Context(), req)
		if err == nil && g.Acquired {
			releaseAfterRestart(t, c, s, req, deadline)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire after restarting the nodes = %+v, %v; want a grant", g, err)
		}
		time.Sleep(20 * time.Millisecond) // bounded polling of external processes
	}
}

// releaseAfterRestart releases req, granted after nodes restarted, and
// waits until no node holds its key. valkey-go keeps several connections
// per client (two on a 2-core machine) and picks one per call, and each
// connection that was open when its node died fails its next call with
// EOF: a release may meet one that the acquire did not, and fail for lack
// of quorum. The release is idempotent per token, so it is asked again
// until the nodes answer; after a partial release, ErrNotHeld is that
// answer.
func releaseAfterRestart(t *testing.T, c *cluster, s *redlock.Store, req store.Request, deadline time.Time) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		err := s.Release(t.Context(), req)
		if err == nil || (attempt > 0 && errors.Is(err, store.ErrNotHeld)) {
			break
		}
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) || time.Now().After(deadline) {
			t.Fatalf("Release after restart = %v", err)
		}
		t.Logf("Release after restart, attempt %d: %v", attempt, err)
		time.Sleep(20 * time.Millisecond) // bounded polling of external processes
	}
	// Release returns at a majority; the other nodes' releases finish in
	// the background.
	key := "lock:" + req.Name
	for i, srv := range c.srvs {
		for {
			v, err := srv.Do("EXISTS", key)
			if err == nil && v == "0" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: EXISTS %s = %s, %v after the release; want 0", i, key, v, err)
			}
			time.Sleep(5 * time.Millisecond) // bounded polling of external processes
		}
	}
}

// TestNoQuorumLeavesNoHold: with 2 of 3 nodes dead, every acquire of one
// name fails for lack of quorum, never as "locked" by the hold of an
// earlier failed acquire on the live node.
func TestNoQuorumLeavesNoHold(t *testing.T) {
	for _, dead := range [][]int{{1, 2}, {0, 1}, {0, 2}} {
		t.Run(fmt.Sprint(dead), func(t *testing.T) {
			c := startNodes(t, 3)
			s := newRedlock(t, c.nodes())
			ctx := t.Context()
			for _, i := range dead {
				c.srvs[i].Kill()
			}
			for i := range 5 {
				g, err := s.Acquire(ctx, mutexReq("X", fmt.Sprintf("t%d", i)))
				wantNoQuorum(t, fmt.Sprintf("Acquire %d", i), g, err)
				noKeys(t, c, dead, "lock:X")
			}
			restartAndAcquire(t, c, s, dead, mutexReq("X", "after"))
		})
	}
}

// TestNoQuorumLockerLeavesNoHold: the same through a Locker, whose TryLock
// asks again with the same token after the error and then releases.
func TestNoQuorumLockerLeavesNoHold(t *testing.T) {
	c := startNodes(t, 3)
	s := newRedlock(t, c.nodes())
	ctx := t.Context()
	dead := []int{1, 2}
	for _, i := range dead {
		c.srvs[i].Kill()
	}
	l, err := dlock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 3 {
		ls, err := l.Mutex("X").TryLock(ctx)
		if ls != nil || !errors.Is(err, store.ErrNoQuorum) {
			t.Fatalf("TryLock %d with 2 of 3 nodes dead = %v, %v; want ErrNoQuorum", i, ls, err)
		}
		noKeys(t, c, dead, "lock:X")
	}
	restartAndAcquire(t, c, s, dead, mutexReq("X", "after"))
	ls, err := l.Mutex("X").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after restart = %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Errorf("Release after restart = %v", err)
	}
}

// TestReleaseReachesSlowNode is the HTTP service's report: a Release
// returns once a majority released, and its caller then cancels its
// context (as every request handler does). The release to the remaining
// node, still waiting behind the acquire that node has not answered yet,
// must reach it anyway: otherwise the token keeps holding that node for
// its TTL, Close does not wait for anything, and once the other nodes die
// every acquire of the name is refused as "locked" instead of failing for
// lack of quorum.
func TestReleaseReachesSlowNode(t *testing.T) {
	c := startNodes(t, 3)
	s, err := redlock.New(c.nodes())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	// Node 2 stalls: the acquire of a is granted by nodes 0 and 1 and is
	// still waiting for node 2 (its request sits in node 2's socket).
	c.srvs[2].Pause()
	a := mutexReq("X", "a")
	if g, err := s.Acquire(ctx, a); err != nil || !g.Acquired {
		t.Fatalf("Acquire(a) with node 2 stalled = %+v, %v; want a grant", g, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	err = s.Release(rctx, a)
	cancel()
	if err != nil {
		t.Fatalf("Release(a) with node 2 stalled = %v, want nil", err)
	}
	c.srvs[2].Resume()
	// Close waits for the release still going to node 2 (bounded by the
	// node timeout); by then node 2 has run the late acquire and the
	// release after it.
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	for i := range c.srvs {
		if v, err := c.srvs[i].Do("EXISTS", "lock:X"); err != nil || v != "0" {
			t.Errorf("node %d: EXISTS lock:X = %s, %v after Release and Close; want 0", i, v, err)
		}
	}

	// With nodes 0 and 1 dead, the name is not held by a on node 2: the
	// store reports no quorum, not a refusal.
	s = newRedlock(t, c.nodes())
	dead := []int{0, 1}
	for _, i := range dead {
		c.srvs[i].Kill()
	}
	for i := range 2 {
		g, err := s.Acquire(ctx, mutexReq("X", fmt.Sprintf("t%d", i)))
		wantNoQuorum(t, fmt.Sprintf("Acquire %d", i), g, err)
		noKeys(t, c, dead, "lock:X")
	}
	restartAndAcquire(t, c, s, dead, mutexReq("X", "after"))
}

// TestMinorityRefusalWithoutQuorum: with 2 of 3 nodes dead and the live
// node held by another client, no grant is possible whoever releases: the
// acquire fails for lack of quorum, whatever order the replies come in
// (the refusal used to win when it arrived before the second failure).
func TestMinorityRefusalWithoutQuorum(t *testing.T) {
	c := startNodes(t, 3)
	s := newRedlock(t, c.nodes())
	ctx := t.Context()
	if _, err := c.srvs[2].Do("SET", "lock:X", "other", "PX", "30000"); err != nil {
		t.Fatal(err)
	}
	dead := []int{0, 1}
	for _, i := range dead {
		c.srvs[i].Kill()
	}
	for i := range 20 {
		g, err := s.Acquire(ctx, mutexReq("X", fmt.Sprintf("t%d", i)))
		wantNoQuorum(t, fmt.Sprintf("Acquire %d", i), g, err)
	}
	if v := c.get(t, 2, "lock:X"); v != "other" {
		t.Errorf("node 2: lock:X = %q, want the other client's %q", v, "other")
	}
}

// TestAcquireAfterReleaseWithSlowNode: a Release that returned while its
// request to a stalled node is still on its way does not make the next
// acquire of the name by another token fail, through the same Store (whose
// request to that node waits behind the release) or through another one
// (which finds the old token on that node only: a minority).
func TestAcquireAfterReleaseWithSlowNode(t *testing.T) {
	c := startNodes(t, 3)
	s := newRedlock(t, c.nodes())
	other := newRedlock(t, c.nodes())
	ctx := t.Context()
	a := mutexReq("X", "a")
	if g, err := s.Acquire(ctx, a); err != nil || !g.Acquired {
		t.Fatalf("Acquire(a) = %+v, %v", g, err)
	}
	c.srvs[2].Pause()
	defer c.srvs[2].Resume()
	rctx, cancel := context.WithCancel(ctx)
	err := s.Release(rctx, a)
	cancel()
	if err != nil {
		t.Fatalf("Release(a) with node 2 stalled = %v, want nil", err)
	}
	for _, st := range []*redlock.Store{s, other} {
		b := mutexReq("X", "b")
		g, err := st.Acquire(ctx, b)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire(b) after Release(a) with node 2 stalled = %+v, %v; want a grant", g, err)
		}
		if err := st.Release(ctx, b); err != nil {
			t.Fatalf("Release(b) = %v", err)
		}
	}
}
