package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// gated is a memory store whose Acquire waits until open is closed.
type gated struct {
	*memory.Store
	open chan struct{}
}

func (g gated) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return store.Grant{}, ctx.Err()
	}
	return g.Store.Acquire(ctx, req)
}

// slowThirdNode returns a Store over three memory nodes whose third one
// answers an Acquire only once its gate is opened.
func slowThirdNode(t *testing.T) (*Store, gated) {
	slow := gated{memory.New(), make(chan struct{})}
	s, err := New([]store.Store{memory.New(), memory.New(), slow}, WithNodeTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, slow
}

// waitLanded waits until name has no flights left.
func waitLanded(t *testing.T, s *Store, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.flightsOf(name)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("flights of %s still %d 10s after the slow node answered", name, len(s.flightsOf(name)))
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFlightsLand: an Acquire that returned before its slow node answered
// is a flight on its name; the Release after it reaches that node only
// once the late acquire has, and the flights of the name end when their
// last node answers.
func TestFlightsLand(t *testing.T) {
	ctx := t.Context()
	s, slow := slowThirdNode(t)
	req := store.Request{Name: "X", Token: "a", TTL: time.Minute, Mode: store.ModeMutex}
	if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
		t.Fatalf("Acquire with node 2 slow = %+v, %v; want a grant", g, err)
	}
	fls := s.flightsOf("X")
	if len(fls) != 1 || !pendingOn(fls, 2) || pendingOn(fls, 0) || pendingOn(fls, 1) {
		t.Fatalf("flights of X after the Acquire: %d, pending on node 2 %v; want one, on node 2 alone", len(fls), len(fls) == 1 && pendingOn(fls, 2))
	}
	if err := s.Release(ctx, req); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if n := len(s.flightsOf("X")); n != 2 {
		t.Fatalf("flights of X after the Release: %d; want 2 (the acquire and the release, both late on node 2)", n)
	}
	close(slow.open)
	waitLanded(t, s, "X")
	// Node 2 ran the late acquire, then the release: it holds nothing.
	if g, err := slow.Store.Acquire(ctx, store.Request{Name: "X", Token: "b", TTL: time.Minute, Mode: store.ModeMutex}); err != nil || !g.Acquired {
		t.Fatalf("node 2 after the flights landed: Acquire(b) = %+v, %v; want a grant (a's hold released)", g, err)
	}
}

// pendingOn reports whether node i may not have answered an operation of fls.
func pendingOn(fls flights, i int) bool {
	for _, fl := range fls {
		if fl.done[i] != nil {
			select {
			case <-fl.done[i]:
			default:
				return true
			}
		}
	}
	return false
}

// TestLateNodesOutliveTheCallersContext: a caller that ends its context as
// soon as Acquire returned (as a Locker does with each attempt's) does not
// cut short the nodes still working on the grant: the slow node runs the
// acquire when it gets to it, and the flight ends then, not when the
// caller's context ended.
func TestLateNodesOutliveTheCallersContext(t *testing.T) {
	s, slow := slowThirdNode(t)
	req := store.Request{Name: "X", Token: "a", TTL: time.Minute, Mode: store.ModeMutex}
	ctx, cancel := context.WithCancel(t.Context())
	g, err := s.Acquire(ctx, req)
	cancel()
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire with node 2 slow = %+v, %v; want a grant", g, err)
	}
	close(slow.open)
	waitLanded(t, s, "X")
	b := store.Request{Name: "X", Token: "b", TTL: time.Minute, Mode: store.ModeMutex}
	if g, err := slow.Store.Acquire(t.Context(), b); err != nil || g.Acquired {
		t.Fatalf("node 2 after the late acquire: Acquire(b) = %+v, %v; want a refusal (a's acquire ran although the caller's context had ended)", g, err)
	}
}

// deadlineSpy is a memory store that reports the deadline of each
// Acquire's context.
type deadlineSpy struct {
	*memory.Store
	got chan time.Time
}

func (d deadlineSpy) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	dl, _ := ctx.Deadline()
	d.got <- dl
	return d.Store.Acquire(ctx, req)
}

// TestNodesKeepTheCallersDeadline: a caller's deadline before the node
// timeout still bounds each node's request (valkey-go's direct round trip
// watches a deadline, not a cancellation), though the requests outlive a
// cancellation once the operation has returned.
func TestNodesKeepTheCallersDeadline(t *testing.T) {
	nodes := make([]store.Store, 3)
	got := make(chan time.Time, len(nodes))
	for i := range nodes {
		nodes[i] = deadlineSpy{memory.New(), got}
	}
	s, err := New(nodes, WithNodeTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	want, _ := ctx.Deadline()
	if g, err := s.Acquire(ctx, store.Request{Name: "D", Token: "a", TTL: time.Minute, Mode: store.ModeMutex}); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v; want a grant", g, err)
	}
	for range nodes {
		if dl := <-got; dl.IsZero() || dl.After(want) {
			t.Errorf("a node's request had deadline %v; want the caller's, %v (the node timeout is 20s)", dl, want)
		}
	}
}
