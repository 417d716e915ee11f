package redlock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// raiseCounter is a node that counts the fence write-backs store/redlock
// makes to it (RaiseFence calls); every other method is the node's own.
type raiseCounter struct {
	*valkey.Store
	raises *atomic.Int64
}

func (r raiseCounter) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
	r.raises.Add(1)
	return r.Store.RaiseFence(ctx, req, fence)
}

// countingNodes returns c's nodes wrapped to count their write-backs into
// raises.
func (c *cluster) countingNodes(raises *atomic.Int64) []store.Store {
	nodes := make([]store.Store, len(c.stores))
	for i, s := range c.stores {
		nodes[i] = raiseCounter{s, raises}
	}
	return nodes
}

// proposalLead is store/redlock's proposedFloorLead: a node that runs its
// script later than this after the client proposed the floor issues its
// own clock's floor instead, and the next quorum is aligned by a
// write-back.
const proposalLead = 20 * time.Millisecond

// writeBackCount counts the write-backs of the grants that a late node
// cannot explain. A grant is timed from before its Acquire to its answer;
// a write-back during a grant that took over proposalLead, or during the
// grant after one (the late node is raised when it is next in a
// majority), may come from a node that ran its script late (a loaded
// machine): it is left out, and so is the grant. It asks for grants until
// want of them count, and fails when fewer than want of 500 did.
type writeBackCount struct {
	raises       *atomic.Int64
	counted, got int64 // grants counted; their write-backs
	slowBefore   bool
}

// grant runs acquire (one grant) and counts it if nothing excuses it.
func (w *writeBackCount) grant(acquire func()) {
	before := w.raises.Load()
	start := time.Now()
	acquire()
	slow := time.Since(start) > proposalLead
	if !slow && !w.slowBefore {
		w.counted++
		w.got += w.raises.Load() - before
	}
	w.slowBefore = slow
}

// run makes grants (numbered from first) until want are counted.
func (w *writeBackCount) run(t *testing.T, first, want int, grant func(i int)) {
	t.Helper()
	for i := first; w.counted < int64(want); i++ {
		if i-first == 500 {
			t.Fatalf("only %d of 500 grants answered within %v (the machine is too loaded to judge the proposal)", w.counted, proposalLead)
		}
		w.grant(func() { grant(i) })
	}
}

// TestFencesAgreeOnReusedName checks that nodes which saw the same grants
// issue the same fence: once a name's counters exist, taking it again and
// again needs no fence write-back (counted as the nodes' RaiseFence calls).
// Every grant takes the clock floor, so nodes agree through the floor the
// client proposes to all of them (see TestFencesAgreeOnFreshNames). With
// fences from each node's clock and no proposal (before 2026-11), nodes that
// straddled a millisecond differed: 36 write-backs in 100 grants on one
// machine.
func TestFencesAgreeOnReusedName(t *testing.T) {
	// The write lock too: every mode's grant takes the proposed floor.
	for _, mode := range []store.Mode{store.ModeMutex, store.ModeWrite} {
		t.Run(mode.String(), func(t *testing.T) { fencesAgreeOnReusedName(t, mode) })
	}
}

func fencesAgreeOnReusedName(t *testing.T, mode store.Mode) {
	c := startNodes(t, 5)
	var raises atomic.Int64
	s := newRedlock(t, c.countingNodes(&raises))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last int64
	grant := func(i int) {
		t.Helper()
		req := store.Request{Name: "reused", Token: "t" + strconv.Itoa(i), TTL: 10 * time.Second, Mode: mode}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired || g.Fence <= last {
			t.Fatalf("grant %d = %+v, %v; want a fence above %d", i, g, err, last)
		}
		last = g.Fence
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release %d = %v", i, err)
		}
	}
	// The first grant of the name through the Store reads each node's
	// clock, and nodes may differ then; write-backs align the counters
	// within a few grants (a node that answered late is raised when it is
	// next among the granting majority).
	aligned := func() bool {
		want := c.get(t, 0, "{lock:reused}:fence")
		for i := range c.srvs {
			if c.get(t, i, "{lock:reused}:fence") != want {
				return false
			}
		}
		return true
	}
	i := 0
	for ; i < 2 || !aligned(); i++ {
		if i == 50 {
			t.Fatal("the nodes' counters still differ after 50 grants")
		}
		grant(i)
	}
	const n = 100
	w := writeBackCount{raises: &raises}
	w.run(t, i, n, grant)
	// Aligned counters stay aligned: every node takes the same proposed
	// floor. One write-back is allowed for a request a node never got (a
	// node timeout on a loaded machine).
	if w.got > 1 {
		t.Errorf("%d fence write-backs in %d grants of one name on aligned counters (each answered within %v), want none", w.got, w.counted, proposalLead)
	}
}

// TestFencesAgreeOnFreshNames checks the proposed fence floor: nodes with no
// counter for a name take the floor store/redlock proposes to all of them,
// so a grant of a fresh name needs no fence write-back either. Without the
// proposal each node issued its own clock's floor, and nodes that
// straddled a millisecond needed one.
func TestFencesAgreeOnFreshNames(t *testing.T) {
	c := startNodes(t, 5)
	var raises atomic.Int64
	s := newRedlock(t, c.countingNodes(&raises))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grant := func(i int) {
		t.Helper()
		req := store.Request{Name: "fresh-" + strconv.Itoa(i), Token: "t", TTL: 10 * time.Second, Mode: store.ModeMutex}
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("grant %d = %+v, %v", i, g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release %d = %v", i, err)
		}
	}
	grant(0) // scripts loaded
	const n = 100
	w := writeBackCount{raises: &raises}
	w.run(t, 1, n, grant)
	// A node that runs the script more than proposalLead after the client
	// read its clock issues its own floor instead: such grants are not
	// counted (see writeBackCount). One is allowed for a request a node
	// never got.
	if w.got > 1 {
		t.Errorf("%d fence write-backs in %d grants of fresh names (each answered within %v), want none", w.got, w.counted, proposalLead)
	}
}
