package valkey_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

func TestRaiseFence(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	req := store.Request{Name: "raise", Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex}
	if err := s.RaiseFence(ctx, req, 5); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("RaiseFence on a free lock = %v, want ErrNotHeld", err)
	}
	g, err := s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	high := g.Fence + 1_000_000
	if err := s.RaiseFence(ctx, req, high); err != nil {
		t.Fatalf("RaiseFence by the holder = %v, want nil", err)
	}
	if err := s.RaiseFence(ctx, req, g.Fence); err != nil {
		t.Fatalf("RaiseFence below the counter = %v, want nil", err)
	}
	other := req
	other.Token = "b"
	if err := s.RaiseFence(ctx, other, high+5); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("RaiseFence by another token = %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	g2, err := s.Acquire(ctx, other)
	if err != nil || !g2.Acquired {
		t.Fatalf("Acquire(b) = %+v, %v", g2, err)
	}
	if g2.Fence != high+1 {
		t.Errorf("fence after RaiseFence(%d) = %d, want %d (never lowered, not raised by others)", high, g2.Fence, high+1)
	}
	if ttl := mustDo(t, srv, "PTTL", s.AuxKey("raise", "fence")); ttl == "-1" {
		t.Errorf("fence counter has no expiry after a raise")
	}
	if err := s.RaiseFence(ctx, store.Request{Name: "raise", Token: "b", TTL: time.Second, Mode: store.ModeFair}, 1); !errors.Is(err, store.ErrNotSupported) {
		t.Errorf("RaiseFence(mode fair) = %v, want ErrNotSupported", err)
	}
}

func TestRaiseFenceWrite(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	w := store.Request{Name: "raise-rw", Token: "w", TTL: 10 * time.Second, Mode: store.ModeWrite}
	r := store.Request{Name: "raise-rw", Token: "r", TTL: 10 * time.Second, Mode: store.ModeRead}
	if err := s.RaiseFence(ctx, w, 5); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("RaiseFence on a free lock = %v, want ErrNotHeld", err)
	}
	g, err := s.Acquire(ctx, w)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire(write) = %+v, %v", g, err)
	}
	high := g.Fence + 1_000_000
	if err := s.RaiseFence(ctx, w, high); err != nil {
		t.Fatalf("RaiseFence by the writer = %v, want nil", err)
	}
	if err := s.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	gr, err := s.Acquire(ctx, r)
	if err != nil || !gr.Acquired {
		t.Fatalf("Acquire(read) = %+v, %v", gr, err)
	}
	if gr.Fence != high {
		t.Errorf("reader fence after RaiseFence(%d) = %d, want %d", high, gr.Fence, high)
	}
	if err := s.RaiseFence(ctx, store.Request{Name: "raise-rw", Token: "r", Mode: store.ModeWrite}, high+9); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("RaiseFence by a reader = %v, want ErrNotHeld", err)
	}
	s.Release(ctx, r)
	w2 := w
	w2.Token = "w2"
	if g2, err := s.Acquire(ctx, w2); err != nil || g2.Fence != high+1 {
		t.Errorf("next writer = %+v, %v; want fence %d", g2, err, high+1)
	}
}

// TestLeastHWMAcquire checks the benchmarks' per-server fence mark
// (redisproto.LeastHWMAcquire, a design no store runs) for what
// docs/benchmarks.md credits it with: a refusal while held, fences that
// rise across names and across a mark that is gone (the clock floor), and
// no key but the lock's on a new name.
func TestLeastHWMAcquire(t *testing.T) {
	srv := testredis.Start(t)
	c := dial(t, srv.URL()).Client()
	ctx := prototest.Context(t)
	acquire := vk.NewLuaScript(redisproto.LeastHWMAcquire.Src)
	take := func(name, token string) int64 {
		t.Helper()
		f, err := acquire.Exec(ctx, c, []string{name, "mark"}, []string{token, "10000"}).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	last := take("a", "t1")
	if last < 1e15 {
		t.Fatalf("first fence %d, want the clock floor (server ms × 1000)", last)
	}
	if f := take("a", "t2"); f != 0 {
		t.Fatalf("acquire of a held lock = %d, want 0", f)
	}
	for i, name := range []string{"b", "c", "a2"} {
		if i == 2 {
			// The mark lost, as in a restart without persistence: the clock
			// floor is above every fence issued once the server's clock has
			// passed the last one (the rate bound of docs/safety.md).
			for deadline := time.Now().Add(5 * time.Second); ; {
				now, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
				if err != nil || len(now) != 2 {
					t.Fatal(now, err)
				}
				s, _ := strconv.ParseInt(now[0], 10, 64)
				us, _ := strconv.ParseInt(now[1], 10, 64)
				if (s*1000+us/1000)*1000 > last {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("server clock not past fence %d", last)
				}
			}
			if err := c.Do(ctx, c.B().Del().Key("mark").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		f := take(name, "t")
		if f <= last {
			t.Fatalf("fence %d after %d, want higher", f, last)
		}
		last = f
	}
	if n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); err != nil || n != 5 {
		t.Fatalf("DBSIZE = %d, %v; want 5 (four lock keys and the mark)", n, err)
	}
}
