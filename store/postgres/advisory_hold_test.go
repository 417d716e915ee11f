package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
)

// Issue 38 on the advisory store: records and bounds kept by the store
// beside its session's holds, MinHold refused, Resume and ForceRelease for
// the session's own holds.

func TestAdvisoryHold(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL()

	t.Run("Record", func(t *testing.T) {
		a := newAdvisory(t, url)
		ctx := ctxT(t)
		req := store.Request{Name: "adv-rec", Token: "t1", TTL: time.Minute, Holder: "host/1", Data: "d"}
		before := time.Now()
		g := mustGrant(t, a, req)
		after := time.Now()
		st, err := a.State(ctx, req.Name)
		if err != nil {
			t.Fatal(err)
		}
		checkOwner(t, st, req, g.Fence, before, after)
		list, _ := a.List(ctx)
		if len(list) != 1 || len(list[0].Owners) != 1 || list[0].Owners[0] != st.Owners[0] {
			t.Errorf("List = %+v; want State's Owners %+v", list, st.Owners)
		}
		re := store.Request{Name: "adv-rec-re", Token: "r1", TTL: time.Minute, Mode: store.ModeReentrant, Owner: "o", Holder: "first"}
		before = time.Now()
		g = mustGrant(t, a, re)
		after = time.Now()
		mustGrant(t, a, store.Request{Name: re.Name, Token: "r2", TTL: time.Minute, Mode: store.ModeReentrant, Owner: "o", Holder: "second"})
		st, _ = a.State(ctx, re.Name)
		checkOwner(t, st, re, g.Fence, before, after)
		bad := store.Request{Name: "adv-rec-bad", Token: "b", TTL: time.Minute, Holder: strings.Repeat("h", store.MaxHolderLen+1)}
		var inv *store.InvalidError
		if _, err := a.Acquire(ctx, bad); !errors.As(err, &inv) || inv.Field != "holder" {
			t.Errorf("Acquire with a %d-byte holder = %v; want an InvalidError for holder", len(bad.Holder), err)
		}
	})

	t.Run("MinHoldNotSupported", func(t *testing.T) {
		a, b := newAdvisory(t, url), newAdvisory(t, url)
		ctx := ctxT(t)
		if store.SupportsMinHold(a) {
			t.Errorf("store.SupportsMinHold(Advisory) = true; want false")
		}
		req := store.Request{Name: "adv-min", Token: "t1", TTL: time.Minute, MinHold: time.Second}
		if g, err := a.Acquire(ctx, req); !errors.Is(err, store.ErrNotSupported) || g.Acquired {
			t.Errorf("Acquire(mutex, MinHold) = %+v, %v; want ErrNotSupported", g, err)
		}
		mustGrant(t, b, store.Request{Name: req.Name, Token: "t2", TTL: time.Minute}) // nothing was taken
		re := store.Request{Name: "adv-min-re", Token: "r", TTL: time.Minute, Mode: store.ModeReentrant, MinHold: time.Hour}
		mustGrant(t, a, re)
		if err := a.Release(ctx, re); err != nil {
			t.Fatal(err)
		}
		mustGrant(t, b, store.Request{Name: re.Name, Token: "r2", TTL: time.Minute, Mode: store.ModeReentrant})
	})

	t.Run("MaxHold", func(t *testing.T) {
		a, b := newAdvisory(t, url), newAdvisory(t, url)
		ctx := ctxT(t)
		const maxHold = time.Second
		req := store.Request{Name: "adv-max", Token: "t1", TTL: time.Minute, MaxHold: maxHold}
		mustGrant(t, a, req)
		if st, _ := a.State(ctx, req.Name); st.TTL <= 0 || st.TTL > maxHold {
			t.Errorf("State TTL %v; want capped to (0, %v]", st.TTL, maxHold)
		}
		if r, err := a.Resume(ctx, req); err != nil || r.TTL > maxHold || r.MaxHoldLeft <= 0 || r.MaxHoldLeft > maxHold {
			t.Errorf("Resume(1m) = %+v, %v; want TTL and MaxHoldLeft in (0, %v]", r, err, maxHold)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			errs := a.Extend(ctx, []store.Request{req})
			if errors.Is(errs[0], store.ErrNotHeld) {
				break
			}
			if errs[0] != nil || time.Now().After(deadline) {
				t.Fatalf("Extend = %v; want ErrNotHeld once the max hold ran out", errs[0])
			}
			time.Sleep(50 * time.Millisecond)
		}
		mustGrant(t, b, store.Request{Name: req.Name, Token: "t2", TTL: time.Minute})
	})

	t.Run("Resume", func(t *testing.T) {
		a, b := newAdvisory(t, url), newAdvisory(t, url)
		ctx := ctxT(t)
		req := store.Request{Name: "adv-resume", Token: "t1", TTL: time.Minute}
		g := mustGrant(t, a, req)
		if r, err := a.Resume(ctx, req); err != nil || r.Fence != g.Fence || r.TTL != time.Minute || r.MaxHoldLeft != 0 {
			t.Errorf("Resume = %+v, %v; want fence %d, TTL 1m", r, err, g.Fence)
		}
		for _, bad := range []store.Request{
			{Name: req.Name, Token: "zz", TTL: time.Minute},
			{Name: req.Name, Token: "t1", TTL: time.Minute, Mode: store.ModeReentrant},
		} {
			if _, err := a.Resume(ctx, bad); !errors.Is(err, store.ErrNotHeld) {
				t.Errorf("Resume(%s, %v) = %v; want ErrNotHeld", bad.Token, bad.Mode, err)
			}
		}
		if _, err := b.Resume(ctx, req); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Resume on another session = %v; want ErrNotHeld (the hold lives with its session)", err)
		}
	})

	t.Run("ForceRelease", func(t *testing.T) {
		a, b := newAdvisory(t, url), newAdvisory(t, url)
		ctx := ctxT(t)
		req := store.Request{Name: "adv-force", Token: "t1", TTL: time.Minute, Holder: "stuck"}
		g := mustGrant(t, a, req)
		ch, stop, err := b.Watch(ctx, req.Name, store.ModeMutex)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		drain(ch)
		// Held by a's session: b cannot end it, and says who holds it.
		if ended, err := b.ForceRelease(ctx, req.Name); !errors.Is(err, store.ErrNotSupported) || !strings.Contains(err.Error(), "backend PID") || len(ended) != 0 {
			t.Errorf("ForceRelease of another session's hold = %+v, %v; want ErrNotSupported naming the backend", ended, err)
		}
		ended, err := a.ForceRelease(ctx, req.Name)
		if err != nil || len(ended) != 1 || ended[0].Owner != "stuck" || ended[0].Fence != g.Fence {
			t.Fatalf("ForceRelease = %+v, %v; want the one hold", ended, err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Error("no wake-up within 10s of ForceRelease")
		}
		if err := a.Release(ctx, req); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Release by the forced holder = %v; want ErrNotHeld", err)
		}
		g2 := mustGrant(t, b, store.Request{Name: req.Name, Token: "t2", TTL: time.Minute})
		if g2.Fence <= g.Fence {
			t.Errorf("next fence %d; want above the forced hold's %d", g2.Fence, g.Fence)
		}
		if ended, err := a.ForceRelease(ctx, "adv-force-none"); err != nil || len(ended) != 0 {
			t.Errorf("ForceRelease of a free name = %+v, %v; want none, nil", ended, err)
		}
	})
}
