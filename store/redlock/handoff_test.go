package redlock_test

import (
	"testing"
	"time"
)

// TestMutexNeverRegistersWaiters: a node that handed the mutex to a
// registered waiter would give it one node, not a quorum, so redlock never
// asks its nodes to register a mutex waiter, even for a request with Queue
// set and a token the nodes would hand the lock to.
func TestMutexNeverRegistersWaiters(t *testing.T) {
	c := startNodes(t, 3)
	s := newRedlock(t, c.nodes())
	ctx := t.Context()
	holder := mutexReq("x", "holder")
	if g, err := s.Acquire(ctx, holder); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	w := mutexReq("x", "waiter")
	w.Queue, w.QueueTTL = true, time.Minute
	for _, n := range c.stores {
		_, stop, err := n.WatchGrant(ctx, w)
		if err != nil {
			t.Fatalf("WatchGrant = %v", err)
		}
		defer stop()
	}
	if g, err := s.Acquire(ctx, w); err != nil || g.Acquired {
		t.Fatalf("Acquire(waiter) = %+v, %v; want a refusal", g, err)
	}
	for i := range c.srvs {
		const key = "{lock:x}:waiters"
		if v, err := c.srvs[i].Do("EXISTS", key); err != nil || v != "0" {
			t.Errorf("node %d: EXISTS %s = %q, %v; want 0", i, key, v, err)
		}
	}
	// Release returns once a majority released; the last node's release
	// runs on in the background and Close waits for it.
	if err := s.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for i := range c.srvs {
		if v := c.get(t, i, "lock:x"); v != "" {
			t.Errorf("node %d: lock:x = %q after the release, want none", i, v)
		}
	}
}
