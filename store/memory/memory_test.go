package memory_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return memory.New() },
		// Restart does not apply: a memory store loses everything with its
		// process. TestFenceAboveEarlierStore checks the clock floor that
		// keeps a new store's fences above an old one's.
	})
}

// TestModel checks the store against storetest's model of the lock
// semantics, in virtual time.
func TestModel(t *testing.T) {
	t.Parallel()
	storetest.RunModel(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return memory.New() },
	}, storetest.ModelConfig{VirtualTime: true})
}

// TestFenceAboveEarlierStore checks that a new store (a restarted process)
// issues fences above every fence an earlier store issued, through the
// wall-clock floor of DESIGN §3, even after many grants.
func TestFenceAboveEarlierStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		old := memory.New()
		var last int64
		for range 500 { // all within one millisecond: the counter runs ahead of the floor
			req := store.Request{Name: "x", Token: "t", TTL: time.Second}
			g, err := old.Acquire(ctx, req)
			if err != nil || !g.Acquired || g.Fence <= last {
				t.Fatalf("Acquire = %+v, %v; want a grant with fence > %d", g, err, last)
			}
			last = g.Fence
			if err := old.Release(ctx, req); err != nil {
				t.Fatalf("Release = %v", err)
			}
		}
		time.Sleep(time.Millisecond) // the restart takes at least a millisecond
		g, err := memory.New().Acquire(ctx, store.Request{Name: "x", Token: "u", TTL: time.Second})
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire on the new store = %+v, %v; want a grant", g, err)
		}
		if g.Fence <= last {
			t.Errorf("first fence of a new store = %d, want > %d (the old store's last)", g.Fence, last)
		}
	})
}

// Idle fence counters are forgotten a day after their last grant, and the
// next grant of a forgotten name still gets a higher fence.
func TestIdleFencesArePruned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New()
		grant := func(name string) int64 {
			t.Helper()
			tok := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
			g, err := s.Acquire(ctx, store.Request{Name: name, Token: tok, TTL: time.Second})
			if err != nil || !g.Acquired {
				t.Fatalf("Acquire(%q) = %+v, %v", name, g, err)
			}
			if err := s.Release(ctx, store.Request{Name: name, Token: tok}); err != nil {
				t.Fatal(err)
			}
			return g.Fence
		}
		old := grant("old")
		time.Sleep(25 * time.Hour)
		for i := range 2048 {
			grant(fmt.Sprintf("n%d", i))
		}
		if st, _ := s.State(ctx, "old"); st.Fence != 0 {
			t.Errorf("fence of a name idle for 25h = %d, want forgotten (0)", st.Fence)
		}
		if f := grant("old"); f <= old {
			t.Errorf("fence after pruning = %d, want above %d", f, old)
		}
	})
}

// WithFenceRetention shortens how long an idle counter is kept: a name idle
// for longer is forgotten, one idle for less is kept, and fences still rise.
func TestFenceRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New(memory.WithFenceRetention(time.Minute))
		grant := func(name string) int64 {
			t.Helper()
			tok := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
			g, err := s.Acquire(ctx, store.Request{Name: name, Token: tok, TTL: time.Second})
			if err != nil || !g.Acquired {
				t.Fatalf("Acquire(%q) = %+v, %v", name, g, err)
			}
			if err := s.Release(ctx, store.Request{Name: name, Token: tok}); err != nil {
				t.Fatal(err)
			}
			return g.Fence
		}
		old := grant("old")
		time.Sleep(50 * time.Second)
		recent := grant("recent")
		time.Sleep(20 * time.Second) // old idle 70 s, recent 20 s
		for i := range 2048 {
			grant(fmt.Sprintf("n%d", i))
		}
		if st, _ := s.State(ctx, "old"); st.Fence != 0 {
			t.Errorf("fence of a name idle for 70 s = %d, want forgotten (0) with a 1 min retention", st.Fence)
		}
		if st, _ := s.State(ctx, "recent"); st.Fence != recent {
			t.Errorf("fence of a name idle for 20 s = %d, want kept (%d)", st.Fence, recent)
		}
		if f := grant("old"); f <= old {
			t.Errorf("fence after pruning = %d, want above %d", f, old)
		}
	})
}

// A held name's last fence is never pruned, however long the hold: a
// reader that joins readers holding for longer than the retention still
// gets their fence, the current one.
func TestHeldFencesAreKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New(memory.WithFenceRetention(time.Second))
		first, err := s.Acquire(ctx, store.Request{Name: "held", Token: "r1", TTL: time.Hour, Mode: store.ModeRead})
		if err != nil || !first.Acquired {
			t.Fatalf("Acquire(r1) = %+v, %v", first, err)
		}
		time.Sleep(time.Minute)
		for i := range 2048 {
			req := store.Request{Name: fmt.Sprintf("n%d", i), Token: "t", TTL: time.Second}
			if _, err := s.Acquire(ctx, req); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		g, err := s.Acquire(ctx, store.Request{Name: "held", Token: "r2", TTL: time.Hour, Mode: store.ModeRead})
		if err != nil || !g.Acquired || g.Fence != first.Fence {
			t.Errorf("reader joining a reader of a minute = %+v, %v; want its fence %d", g, err, first.Fence)
		}
	})
}
