package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
	"github.com/dlock-dev/dlock/storetest"
)

// cluster is N independent redis-server processes and a valkey store on
// each, all stopped when the test ends.
type cluster struct {
	srvs   []*testredis.Server
	stores []*valkey.Store
}

func startNodes(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{srvs: make([]*testredis.Server, n), stores: make([]*valkey.Store, n)}
	for i := range n {
		c.srvs[i] = testredis.Start(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, srv := range c.srvs {
		s, err := valkey.Dial(ctx, srv.URL())
		if err != nil {
			t.Fatalf("valkey.Dial(%s) = %v", srv.URL(), err)
		}
		t.Cleanup(func() { s.Close() })
		c.stores[i] = s
	}
	return c
}

func (c *cluster) nodes() []store.Store { return asStores(c.stores) }

// get returns the value of key on node i ("" when it has none).
func (c *cluster) get(t *testing.T, i int, key string) string {
	t.Helper()
	v, err := c.srvs[i].Do("GET", key)
	if err != nil {
		t.Fatalf("node %d: GET %s = %v", i, key, err)
	}
	return v
}

// unsupportedOn lists the modes redlock over s refuses: those redlock
// never runs, and read-write when s does not run it.
func unsupportedOn(t *testing.T, s store.Store) []store.Mode {
	out := []store.Mode{store.ModeReentrant, store.ModeFair, store.ModeSemaphore}
	req := store.Request{Name: "probe-rw", Token: "probe", TTL: time.Second, Mode: store.ModeWrite}
	g, err := s.Acquire(t.Context(), req)
	if g.Acquired {
		s.Release(t.Context(), req)
	}
	fr := s.(store.FenceRaiser)
	if errors.Is(err, store.ErrNotSupported) || errors.Is(fr.RaiseFence(t.Context(), req, 1), store.ErrNotSupported) {
		out = append(out, store.ModeRead, store.ModeWrite)
	}
	return out
}

func TestConformanceValkey(t *testing.T) {
	c := startNodes(t, 5)
	storetest.Run(t, storetest.Harness{
		// A generous node timeout: the suite checks semantics, and a
		// loaded test machine can stall a node for tens of milliseconds.
		New: func(t *testing.T) store.Store {
			return newRedlock(t, c.nodes(), redlock.WithNodeTimeout(2*time.Second))
		},
		// Every node restarts empty: fences stay monotonic through the
		// nodes' hybrid clock floor.
		Restart: func(t *testing.T) {
			for _, srv := range c.srvs {
				srv.Restart(t)
			}
		},
		Unsupported: unsupportedOn(t, c.stores[0]),
	})
}

func TestKillTwoOfFive(t *testing.T) {
	c := startNodes(t, 5)
	// A generous node timeout: with two nodes dead, one live node slower
	// than the default (500ms for this TTL) on a loaded test machine loses
	// the quorum (seen under -race). The dead nodes refuse at once.
	s := newRedlock(t, c.nodes(), redlock.WithNodeTimeout(2*time.Second))
	ctx := t.Context()
	c.srvs[1].Kill()
	c.srvs[3].Kill()
	for i := range 10 {
		req := mutexReq("k2", fmt.Sprintf("t%d", i))
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire %d with 2 of 5 nodes dead = %+v, %v; want a grant", i, g, err)
		}
		if errs := s.Extend(ctx, []store.Request{req}); errs[0] != nil {
			t.Fatalf("Extend with 2 of 5 nodes dead = %v, want nil", errs[0])
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release with 2 of 5 nodes dead = %v, want nil", err)
		}
	}
	// The Locker works the same over it.
	l, err := dlock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = l.Do(ctx, "k2-do", func(ctx context.Context) error { return nil })
	if err != nil {
		t.Errorf("Do with 2 of 5 nodes dead = %v, want nil", err)
	}
}

func TestKillThreeOfFive(t *testing.T) {
	c := startNodes(t, 5)
	s := newRedlock(t, c.nodes())
	ctx := t.Context()
	dead := []int{0, 2, 4}
	for _, i := range dead {
		c.srvs[i].Kill()
	}
	for i := range 20 {
		start := time.Now()
		g, err := s.Acquire(ctx, mutexReq("k3", fmt.Sprintf("t%d", i)))
		if g.Acquired {
			t.Fatalf("Acquire %d with 3 of 5 nodes dead = %+v; want no grant", i, g)
		}
		var qe *redlock.QuorumError
		if !errors.Is(err, store.ErrNoQuorum) || !errors.As(err, &qe) {
			t.Fatalf("Acquire %d with 3 of 5 nodes dead = %v; want a *QuorumError", i, err)
		}
		for _, ne := range qe.Nodes {
			var se *store.StoreError
			if !errors.As(ne, &se) || (se.Node != 0 && se.Node != 2 && se.Node != 4) {
				t.Errorf("node error %v; want a *StoreError naming a dead node", ne)
			}
		}
		if i == 0 {
			t.Logf("Acquire without quorum failed after %v: %v", time.Since(start), err)
		}
	}
	for _, i := range []int{1, 3} {
		if v := c.get(t, i, "lock:k3"); v != "" {
			t.Errorf("node %d holds lock:k3 = %q after failed acquires; want nothing", i, v)
		}
	}
	l, err := dlock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Mutex("k3").TryLock(ctx); !errors.Is(err, store.ErrNoQuorum) {
		t.Errorf("TryLock with 3 of 5 nodes dead = %v, want ErrNoQuorum", err)
	}

	// Service resumes once the nodes are back.
	for _, i := range dead {
		c.srvs[i].Restart(t)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req := mutexReq("k3", "after")
		g, err := s.Acquire(ctx, req)
		if err == nil && g.Acquired {
			releaseAfterRestart(t, c, s, req, deadline)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire after restarting the nodes = %+v, %v; want a grant", g, err)
		}
		time.Sleep(20 * time.Millisecond) // valkey-go reconnects in the background
	}
}

func TestPartialAcquireLeavesNothing(t *testing.T) {
	c := startNodes(t, 5)
	s := newRedlock(t, c.nodes())
	ctx := t.Context()
	for _, i := range []int{0, 2, 3} {
		if _, err := c.srvs[i].Do("SET", "lock:x", "other", "NX", "PX", "30000"); err != nil {
			t.Fatal(err)
		}
	}
	g, err := s.Acquire(ctx, mutexReq("x", "ours"))
	if err != nil || g.Acquired {
		t.Fatalf("Acquire against a majority held by another = %+v, %v; want a refusal", g, err)
	}
	if g.RetryAfter < 25*time.Second {
		t.Errorf("RetryAfter = %v, want about 30s", g.RetryAfter)
	}
	for i := range c.srvs {
		want := ""
		if i == 0 || i == 2 || i == 3 {
			want = "other"
		}
		if v := c.get(t, i, "lock:x"); v != want {
			t.Errorf("node %d: lock:x = %q after the refused acquire, want %q", i, v, want)
		}
	}
	l, err := dlock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.Mutex("x").TryLock(ctx)
	var le *dlock.LockedError
	if !errors.As(err, &le) {
		t.Errorf("TryLock = %v, want a *LockedError", err)
	}
}

// TestPausedHolder: a holder that does not renew and outlives its TTL (as a
// paused process would) finds its lease over and its extension refused once
// another holder took the lock.
func TestPausedHolder(t *testing.T) {
	c := startNodes(t, 5)
	s := newRedlock(t, c.nodes())
	ctx := t.Context()
	l, err := dlock.New(s, dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := l.Mutex("paused").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(a) = %v", err)
	}
	b, err := l.Mutex("paused", dlock.WithTTL(10*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock(b) = %v", err)
	}
	defer b.Release(ctx)
	select {
	case <-a.Done():
	default:
		t.Errorf("a.Done() open after b acquired the lock")
	}
	if !errors.Is(a.Err(), dlock.ErrLeaseLost) {
		t.Errorf("a.Err() = %v, want ErrLeaseLost", a.Err())
	}
	if err := a.Extend(ctx, 0); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("a.Extend = %v, want ErrLeaseLost", err)
	}
	// The store itself refuses a's token on a majority.
	stale := store.Request{Name: "paused", Token: a.Token(), TTL: time.Second, Mode: store.ModeMutex}
	if errs := s.Extend(ctx, []store.Request{stale}); !errors.Is(errs[0], store.ErrNotHeld) {
		t.Errorf("Store.Extend(a) = %v, want ErrNotHeld", errs[0])
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("b.Fence() = %d, want above a's %d", b.Fence(), a.Fence())
	}
}

// fencedRegister accepts a write only with a fence at least the highest it
// has seen, like the protected resource of DESIGN §5.
type fencedRegister struct {
	mu    sync.Mutex
	fence int64
	value string
}

func (r *fencedRegister) write(fence int64, v string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence < r.fence {
		return fmt.Errorf("stale fence %d < %d", fence, r.fence)
	}
	r.fence, r.value = fence, v
	return nil
}

// TestFencedAfterClockJump is Kleppmann's clock-jump scenario: a holds
// nodes 0-2 (3 and 4 unreachable); the key expires early on node 2 (a clock
// jump there, simulated with PEXPIRE); b then wins nodes 2-4. Redlock alone
// lets both believe they hold the lock (a known limit, shown here); the
// fence makes b's token higher, so the resource rejects a's late write.
// Node 0 issues the highest fence (its counter is far ahead), and node 0 is
// not in b's majority: only the write-back to node 2 makes b's fence win.
func TestFencedAfterClockJump(t *testing.T) {
	c := startNodes(t, 5)
	s := newRedlock(t, c.nodes())
	ctx := t.Context()

	high := time.Now().UnixMilli()*1000 + 1e12
	pre := mutexReq("x", "pre")
	if g, err := c.stores[0].Acquire(ctx, pre); err != nil || !g.Acquired {
		t.Fatalf("node 0 Acquire = %+v, %v", g, err)
	}
	if err := c.stores[0].RaiseFence(ctx, pre, high); err != nil {
		t.Fatal(err)
	}
	if err := c.stores[0].Release(ctx, pre); err != nil {
		t.Fatal(err)
	}

	c.srvs[3].Kill()
	c.srvs[4].Kill()
	a := mutexReq("x", "a")
	ga, err := s.Acquire(ctx, a)
	if err != nil || !ga.Acquired {
		t.Fatalf("Acquire(a) on nodes 0-2 = %+v, %v", ga, err)
	}
	if ga.Fence <= high {
		t.Fatalf("a's fence = %d, want above node 0's counter %d", ga.Fence, high)
	}
	if _, err := c.srvs[2].Do("PEXPIRE", "lock:x", "1"); err != nil {
		t.Fatal(err)
	}
	c.srvs[3].Restart(t)
	c.srvs[4].Restart(t)

	var gb store.Grant
	deadline := time.Now().Add(30 * time.Second)
	for {
		gb, err = s.Acquire(ctx, mutexReq("x", "b"))
		if err == nil && gb.Acquired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire(b) on nodes 2-4 = %+v, %v; want a grant", gb, err)
		}
		time.Sleep(20 * time.Millisecond) // valkey-go reconnects to 3 and 4
	}
	t.Logf("a and b both hold x by Redlock (known limit): fences a=%d b=%d", ga.Fence, gb.Fence)
	if gb.Fence <= ga.Fence {
		t.Fatalf("b's fence = %d, want above a's %d", gb.Fence, ga.Fence)
	}
	var reg fencedRegister
	if err := reg.write(gb.Fence, "b"); err != nil {
		t.Fatalf("b's write = %v", err)
	}
	if err := reg.write(ga.Fence, "a"); err == nil {
		t.Errorf("a's stale write with fence %d accepted after b's %d", ga.Fence, gb.Fence)
	}
	if reg.value != "b" {
		t.Errorf("register = %q, want %q", reg.value, "b")
	}
}

// TestModelValkey checks redlock over five redis-servers against
// storetest's model of the lock semantics.
func TestModelValkey(t *testing.T) {
	t.Parallel()
	c := startNodes(t, 5)
	storetest.RunModel(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			return newRedlock(t, c.nodes(), redlock.WithNodeTimeout(2*time.Second))
		},
		Unsupported: unsupportedOn(t, c.stores[0]),
	}, storetest.ModelConfig{})
}
