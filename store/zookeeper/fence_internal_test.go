package zookeeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
	"github.com/go-zookeeper/zk"
)

// TestFenceRisesWithClockStepsBack: with the store's clock floor pinned,
// then stepped back an hour twice, the fences of every pattern on one name
// still rise by last + 1 (the fence child); readers share the current
// fence, a re-entry its hold's, and an election's term is its fence.
func TestFenceRisesWithClockStepsBack(t *testing.T) {
	srv := zktest.Start(t)
	s, err := New(t.Context(), []string{srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var pinned atomic.Int64
	pinned.Store(wallFloor())
	s.floor = pinned.Load
	ctx := t.Context()
	const name = "stepped"
	var last int64
	grant := func(req store.Request) store.Grant {
		t.Helper()
		req.Name, req.TTL = name, 10*time.Second
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire(%+v) = %+v, %v; want a grant", req, g, err)
		}
		return g
	}
	release := func(req store.Request) {
		t.Helper()
		req.Name, req.TTL = name, 10*time.Second
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release(%+v) = %v", req, err)
		}
	}
	rises := func(what string, f int64) {
		t.Helper()
		if f <= last {
			t.Errorf("%s: fence %d, want > %d", what, f, last)
		}
		last = f
	}
	for step := range 3 {
		if step > 0 {
			pinned.Add(-int64(time.Hour / time.Microsecond)) // ms×1000 is µs
		}
		for _, m := range []store.Mode{store.ModeMutex, store.ModeFair, store.ModeSemaphore, store.ModeElection} {
			req := store.Request{Token: fmt.Sprintf("%v-%d", m, step), Mode: m, Limit: 3, Value: "v"}
			g := grant(req)
			rises(fmt.Sprintf("step %d %v", step, m), g.Fence)
			if m == store.ModeElection {
				if ld, err := s.Leader(ctx, name); err != nil || ld.Term != g.Fence {
					t.Errorf("step %d: Leader = %+v, %v; want term %d", step, ld, err, g.Fence)
				}
			}
			if again := grant(req); again.Fence != g.Fence {
				t.Errorf("step %d %v: repeated Acquire fence %d, want %d", step, m, again.Fence, g.Fence)
			}
			release(req)
		}
		// A writer, then a downgrade reader and another reader once it is
		// gone: the readers share the writer's fence.
		w := store.Request{Token: fmt.Sprintf("w-%d", step), Mode: store.ModeWrite}
		gw := grant(w)
		rises(fmt.Sprintf("step %d writer", step), gw.Fence)
		down := store.Request{Token: fmt.Sprintf("down-%d", step), Owner: w.Token, Mode: store.ModeRead}
		if g := grant(down); g.Fence != gw.Fence {
			t.Errorf("step %d: downgrade reader fence %d, want the writer's %d", step, g.Fence, gw.Fence)
		}
		release(w)
		r := store.Request{Token: fmt.Sprintf("r-%d", step), Mode: store.ModeRead}
		if g := grant(r); g.Fence != gw.Fence {
			t.Errorf("step %d: reader fence %d, want the current %d", step, g.Fence, gw.Fence)
		}
		if st, err := s.State(ctx, name); err != nil || st.Fence != gw.Fence {
			t.Errorf("step %d: State = %+v, %v; want fence %d", step, st, err, gw.Fence)
		}
		release(down)
		release(r)
		// A reentrant hold and its re-entry share one fence.
		re := store.Request{Token: fmt.Sprintf("re-%d", step), Owner: fmt.Sprintf("owner-%d", step), Mode: store.ModeReentrant}
		g1 := grant(re)
		rises(fmt.Sprintf("step %d reentrant", step), g1.Fence)
		re2 := re
		re2.Token += "-again"
		if g2 := grant(re2); g2.Fence != g1.Fence || g2.Count != 2 {
			t.Errorf("step %d: re-entry = %+v, want fence %d, Count 2", step, g2, g1.Fence)
		}
		release(re)
		release(re2)
	}
	if want := pinned.Load(); last > want+1000 {
		t.Logf("fences ran %d ahead of the pinned floor", last-want)
	}
}

// TestGoneHolderTakesNoFence: the teammate's worry, that a holder whose
// session expired between its listing and its fence write could end up
// with a fence above the next holder's. Holder a's node is listed as
// holding, then goes (as its session's expiry deletes it); b is granted;
// a's fence write then comes in. The multi-op checks a's node, so it
// fails as a whole: a gets no fence and the fence child keeps b's.
func TestGoneHolderTakesNoFence(t *testing.T) {
	srv := zktest.Start(t)
	s, err := New(t.Context(), []string{srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	const name = "expired"
	// a's acquisition up to its fence: its node is created and holds.
	a := store.Request{Name: name, Token: "a", TTL: 10 * time.Second}
	dir := s.dir("m", name)
	if err := s.ensure("m", dir); err != nil {
		t.Fatal(err)
	}
	nd := nodeData{TTL: a.TTL.Milliseconds()}
	data, _ := json.Marshal(nd)
	pathA, err := s.conn.Create(dir+"/"+nodePrefix(a, false), data, zk.FlagEphemeralSequential, s.acl)
	if err != nil {
		t.Fatal(err)
	}
	es, err := s.list(dir)
	if err != nil || len(es) != 1 || !holds("m", es, 0, 0) {
		t.Fatalf("list = %+v, %v; want a's node holding", es, err)
	}
	// a's session expires: the server deletes its ephemeral node.
	if err := s.conn.Delete(pathA, -1); err != nil {
		t.Fatal(err)
	}
	gb, err := s.Acquire(ctx, store.Request{Name: name, Token: "b", TTL: 10 * time.Second})
	if err != nil || !gb.Acquired {
		t.Fatalf("Acquire(b) = %+v, %v; want a grant", gb, err)
	}
	// a's fence write, late: every way a grant of a takes its fence.
	if f, err := s.nodeFence(dir, pathA, &known{d: nd}); !errors.Is(err, errNodeGone) {
		t.Errorf("fence of a's gone node = %d, %v; want errNodeGone", f, err)
	}
	if g, err := s.grant("m", a, dir, pathA, es, 0, &known{d: nd}); err != nil || g.Acquired {
		t.Errorf("grant of a's gone node = %+v, %v; want a refusal", g, err)
	}
	if cur := s.currentFence(dir); cur != gb.Fence {
		t.Errorf("the name's fence after a's late write = %d, want b's %d", cur, gb.Fence)
	}
	if len(s.local) > 1 {
		t.Errorf("tracked nodes = %v; a's gone node must not be tracked", s.local)
	}
}

// TestConcurrentFences: permits of one semaphore granted at once each get
// a fence of their own (the fence child's compare-and-set makes the losers
// read again); readers of a name with no fence yet, granted at once, share
// the one a first reader issued.
func TestConcurrentFences(t *testing.T) {
	srv := zktest.Start(t)
	ctx := t.Context()
	const n = 8
	stores := make([]*Store, 4)
	for i := range stores {
		s, err := New(ctx, []string{srv.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	run := func(mode store.Mode, name string) []int64 {
		t.Helper()
		fences := make([]int64, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				req := store.Request{Name: name, Token: "t" + strconv.Itoa(i), TTL: 10 * time.Second, Mode: mode, Limit: n}
				g, err := stores[i%len(stores)].Acquire(ctx, req)
				if err != nil || !g.Acquired {
					t.Errorf("%v Acquire(%d) = %+v, %v; want a grant", mode, i, g, err)
					return
				}
				fences[i] = g.Fence
			})
		}
		wg.Wait()
		return fences
	}
	seen := map[int64]bool{}
	for _, f := range run(store.ModeSemaphore, "permits") {
		if f == 0 || seen[f] {
			t.Errorf("semaphore fences %v: want %d distinct", seen, n)
		}
		seen[f] = true
	}
	readers := run(store.ModeRead, "readers")
	for _, f := range readers {
		if f == 0 || f != readers[0] {
			t.Errorf("first readers' fences = %v; want one shared fence", readers)
			break
		}
	}
}
