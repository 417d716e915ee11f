package memory_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// A fair lock handed to its queued head counts the waiter's MinHold from
// the Acquire by which the waiter learns of the handoff, when that is
// later: the job the lock guards cannot start before then, so the next
// grant comes no sooner than MinHold after it could.
func TestHandedFairHoldCountsMinHoldFromClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New()
		a := store.Request{Name: "job", Token: "a", TTL: time.Minute, Mode: store.ModeFair}
		b := store.Request{Name: "job", Token: "b", TTL: time.Minute, Mode: store.ModeFair,
			Queue: true, QueueTTL: time.Minute, MinHold: time.Second, Holder: "replica-b"}
		c := store.Request{Name: "job", Token: "c", TTL: time.Minute, Mode: store.ModeFair}
		if g, err := s.Acquire(ctx, a); err != nil || !g.Acquired {
			t.Fatalf("Acquire(a) = %+v, %v", g, err)
		}
		if g, err := s.Acquire(ctx, b); err != nil || g.Acquired {
			t.Fatalf("Acquire(b) = %+v, %v; want queued", g, err)
		}
		if err := s.Release(ctx, a); err != nil { // hands the lock to b
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // b learns late
		if g, err := s.Acquire(ctx, b); err != nil || !g.Acquired {
			t.Fatalf("Acquire(b) after the handoff = %+v, %v; want its grant", g, err)
		}
		if err := s.Release(ctx, b); err != nil {
			t.Fatalf("Release(b) before its MinHold = %v, want nil", err)
		}
		time.Sleep(900 * time.Millisecond) // 1.4 s after the handoff, 0.9 s after b learned
		if g, err := s.Acquire(ctx, c); err != nil || g.Acquired {
			t.Errorf("Acquire(c) 0.9 s after b learned of its grant (MinHold 1 s) = %+v, %v; want refused", g, err)
		}
		time.Sleep(200 * time.Millisecond)
		if g, err := s.Acquire(ctx, c); err != nil || !g.Acquired {
			t.Errorf("Acquire(c) 1.1 s after b learned of its grant = %+v, %v; want granted", g, err)
		}
	})
}

// ForceRelease ends a hold kept by its MinHold and returns it with its
// record and the grant's time by the store's clock; the fence goes on
// rising.
func TestForceReleaseReturnsTheRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New()
		req := store.Request{Name: "n", Token: "t", TTL: time.Minute, MinHold: time.Hour, Holder: "host/1", Data: "d"}
		granted := time.Now()
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v", g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		ended, err := s.ForceRelease(ctx, "n")
		want := store.Holder{Owner: "host/1", Data: "d", Since: granted.Truncate(time.Millisecond), Fence: g.Fence}
		if err != nil || len(ended) != 1 || ended[0] != want {
			t.Fatalf("ForceRelease = %+v, %v; want [%+v]", ended, err, want)
		}
		next, err := s.Acquire(ctx, store.Request{Name: "n", Token: "u", TTL: time.Minute})
		if err != nil || !next.Acquired || next.Fence <= g.Fence {
			t.Errorf("Acquire after ForceRelease = %+v, %v; want a grant with fence > %d", next, err, g.Fence)
		}
	})
}
