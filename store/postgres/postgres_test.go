package postgres_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/dlock-dev/dlock/storetest"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func newStore(t testing.TB, url string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	s, err := postgres.New(t.Context(), url, opts...)
	if err != nil {
		t.Fatalf("postgres.New(%q) = %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newAdvisory(t *testing.T, url string) *postgres.Advisory {
	t.Helper()
	s, err := postgres.NewAdvisory(t.Context(), url)
	if err != nil {
		t.Fatalf("postgres.NewAdvisory(%q) = %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("pgx.Connect = %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) store.Store { return newStore(t, srv.URL()) },
		Restart: func(t *testing.T) { srv.Restart(t) },
	})
	t.Run("Model", func(t *testing.T) {
		storetest.RunModel(t, storetest.Harness{
			New: func(t *testing.T) store.Store { return newStore(t, srv.URL()) },
		}, storetest.ModelConfig{
			// Each acquisition of a reentrant hold keeps its own expiry.
			ReentrantApart: true,
			LazyHandoff:    true,
		})
	})
}

// advisoryUnsupported are the modes Advisory documents as unsupported.
var advisoryUnsupported = []store.Mode{store.ModeRead, store.ModeWrite, store.ModeFair, store.ModeSemaphore, store.ModeElection}

func TestAdvisoryConformance(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, storetest.Harness{
		New:         func(t *testing.T) store.Store { return newAdvisory(t, srv.URL()) },
		Restart:     func(t *testing.T) { srv.Restart(t) },
		Unsupported: advisoryUnsupported,
	})
	t.Run("Model", func(t *testing.T) {
		storetest.RunModel(t, storetest.Harness{
			New:         func(t *testing.T) store.Store { return newAdvisory(t, srv.URL()) },
			Unsupported: advisoryUnsupported,
		}, storetest.ModelConfig{})
	})
}

// TestAdvisoryReentrantOneExpiry: the acquisitions of an advisory
// reentrant hold share one expiry, pushed out, never in: a re-entry or a
// retry with a short TTL lives as long as the hold (RunModel seed
// 15414530220690173444: a short re-entry had lapsed, Release ErrNotHeld).
func TestAdvisoryReentrantOneExpiry(t *testing.T) {
	srv := pgtest.Start(t)
	s := newAdvisory(t, srv.URL())
	ctx := t.Context()
	const short = 150 * time.Millisecond
	req := func(tok string, ttl time.Duration) store.Request {
		return store.Request{Name: "adv-one-expiry", Token: tok, TTL: ttl, Mode: store.ModeReentrant, Owner: "o"}
	}
	for _, r := range []store.Request{req("a", time.Minute), req("b", short), req("a", short)} {
		if g, err := s.Acquire(ctx, r); err != nil || !g.Acquired {
			t.Fatalf("Acquire(%s, ttl %v) = %+v, %v; want a grant", r.Token, r.TTL, g, err)
		}
	}
	time.Sleep(3 * short) // past the short TTLs, well within the hold's
	for _, tok := range []string{"b", "a"} {
		if err := s.Release(ctx, req(tok, time.Minute)); err != nil {
			t.Errorf("Release(%s) after its short TTL = %v, want nil (the hold's expiry)", tok, err)
		}
	}
}

func TestStore(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.URL()

	t.Run("WatchWakesOnRelease", func(t *testing.T) {
		a, b := newStore(t, url), newStore(t, url)
		ctx := ctxT(t)
		req := store.Request{Name: "watch-release", Token: "t1", TTL: time.Minute}
		if g, err := a.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v; want a grant", g, err)
		}
		ch, stop, err := b.Watch(ctx, req.Name, store.ModeMutex)
		if err != nil {
			t.Fatalf("Watch = %v", err)
		}
		defer stop()
		drain(ch) // the listener's first connect wakes everyone once
		if err := a.Release(ctx, req); err != nil {
			t.Fatalf("Release = %v", err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("no wake-up within 10s of Release")
		}
	})

	t.Run("RefusalReportsRemainingByDatabaseClock", func(t *testing.T) {
		s := newStore(t, url)
		ctx := ctxT(t)
		req := store.Request{Name: "retry-after", Token: "t1", TTL: 5 * time.Second}
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v; want a grant", g, err)
		}
		g, err := s.Acquire(ctx, store.Request{Name: req.Name, Token: "t2", TTL: time.Second})
		if err != nil || g.Acquired || g.RetryAfter <= 0 || g.RetryAfter > 5*time.Second {
			t.Errorf("Acquire(other) = %+v, %v; want a refusal with 0 < RetryAfter <= 5s", g, err)
		}
	})

	t.Run("StateAndList", func(t *testing.T) {
		s := newStore(t, url)
		ctx := ctxT(t)
		for _, tok := range []string{"a", "b"} {
			req := store.Request{Name: "sem-state", Token: tok, TTL: time.Minute, Mode: store.ModeSemaphore, Limit: 3}
			if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
				t.Fatalf("Acquire = %+v, %v; want a grant", g, err)
			}
		}
		st, err := s.State(ctx, "sem-state")
		if err != nil || st.Holders != 2 || st.Limit != 3 || st.Mode != store.ModeSemaphore || st.Fence <= 0 || st.TTL <= 0 {
			t.Errorf("State = %+v, %v; want 2 holders of a semaphore of 3", st, err)
		}
		list, err := s.List(ctx)
		if err != nil {
			t.Fatalf("List = %v", err)
		}
		found := false
		for _, st := range list {
			found = found || st.Name == "sem-state"
		}
		if !found {
			t.Errorf("List = %+v, want sem-state in it", list)
		}
		if err := s.Sweep(ctx); err != nil {
			t.Errorf("Sweep = %v", err)
		}
	})

	t.Run("FencedUpdate", func(t *testing.T) {
		c := connect(t, url)
		ctx := ctxT(t)
		if _, err := c.Exec(ctx, `CREATE TABLE inventory_item (id int PRIMARY KEY, quantity int, fence_token bigint NOT NULL DEFAULT 0);
INSERT INTO inventory_item VALUES (1, 10, 0)`); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			fence int64
			id    int
			n     int64
			err   error
		}{
			{34, 1, 1, nil},
			{34, 1, 1, nil}, // the same lease writes again
			{33, 1, 0, postgres.ErrStaleFence},
			{35, 1, 1, nil},
			{36, 2, 0, nil}, // no such row
		}
		for _, st := range steps {
			n, err := postgres.FencedUpdate(ctx, c, "public.inventory_item", "quantity = quantity - 1", "id = $2", st.fence, st.id)
			if n != st.n || !errors.Is(err, st.err) {
				t.Errorf("FencedUpdate(fence %d, id %d) = %d, %v; want %d, %v", st.fence, st.id, n, err, st.n, st.err)
			}
		}
		var q int
		c.QueryRow(ctx, "SELECT quantity FROM inventory_item WHERE id = 1").Scan(&q)
		if q != 7 {
			t.Errorf("quantity = %d, want 7", q)
		}
	})

	t.Run("XactLock", func(t *testing.T) {
		c1, c2 := connect(t, url), connect(t, url)
		ctx := ctxT(t)
		tx1, err := c1.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := postgres.XactLock(ctx, tx1, "xact"); err != nil {
			t.Fatalf("XactLock = %v", err)
		}
		tx2, err := c2.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := postgres.TryXactLock(ctx, tx2, "xact"); ok || err != nil {
			t.Errorf("TryXactLock while held = %v, %v; want false, nil", ok, err)
		}
		tx2.Rollback(ctx)
		tx1.Commit(ctx)
		tx2, _ = c2.Begin(ctx)
		defer tx2.Rollback(ctx)
		if ok, err := postgres.TryXactLock(ctx, tx2, "xact"); !ok || err != nil {
			t.Errorf("TryXactLock after commit = %v, %v; want true, nil", ok, err)
		}
	})

	t.Run("AdvisoryInterop", func(t *testing.T) {
		a := newAdvisory(t, url)
		c := connect(t, url)
		ctx := ctxT(t)
		if _, err := c.Exec(ctx, "SELECT pg_advisory_lock(hashtext('resource-1'))"); err != nil {
			t.Fatal(err)
		}
		req := store.Request{Name: "resource-1", Token: "t1", TTL: time.Minute}
		if g, err := a.Acquire(ctx, req); err != nil || g.Acquired {
			t.Fatalf("Acquire while held by plain pg_advisory_lock = %+v, %v; want a refusal", g, err)
		}
		if _, err := c.Exec(ctx, "SELECT pg_advisory_unlock(hashtext('resource-1'))"); err != nil {
			t.Fatal(err)
		}
		if g, err := a.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("Acquire after unlock = %+v, %v; want a grant", g, err)
		}
		var ok bool
		c.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext('resource-1'))").Scan(&ok)
		if ok {
			t.Errorf("pg_try_advisory_lock while dlock holds it = true, want false")
		}
	})

	t.Run("AdvisorySessionLoss", func(t *testing.T) {
		a, b := newAdvisory(t, url), newAdvisory(t, url)
		c := connect(t, url)
		ctx := ctxT(t)
		req := store.Request{Name: "session-loss", Token: "t1", TTL: time.Minute}
		if g, err := a.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v; want a grant", g, err)
		}
		// Terminate the backend that holds the lock, as an admin or a
		// failover would.
		var killed bool
		err := c.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid() AND objid = (hashtext('session-loss')::bigint & 4294967295)::oid`).Scan(&killed)
		if err != nil || !killed {
			t.Fatalf("terminate the holder's backend = %v, %v", killed, err)
		}
		if errs := a.Extend(ctx, []store.Request{req}); !errors.Is(errs[0], store.ErrNotHeld) {
			t.Errorf("Extend after the session ended = %v, want ErrNotHeld", errs[0])
		}
		other := store.Request{Name: req.Name, Token: "t2", TTL: time.Minute}
		deadline := time.Now().Add(10 * time.Second)
		for {
			g, err := b.Acquire(ctx, other)
			if err == nil && g.Acquired {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Acquire by another session = %+v, %v; want a grant once the holder's session ended", g, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestWatchAcrossRestart checks that the listener reconnects after the
// server restarts, wakes its watchers when it is back (notifications may
// have been missed), and then delivers releases again.
func TestWatchAcrossRestart(t *testing.T) {
	srv := pgtest.Start(t)
	s := newStore(t, srv.URL())
	ctx := ctxT(t)
	ch, stop, err := s.Watch(ctx, "restart", store.ModeMutex)
	if err != nil {
		t.Fatalf("Watch = %v", err)
	}
	defer stop()
	drain(ch)
	srv.Restart(t)
	select {
	case <-ch: // woken on reconnect
	case <-time.After(30 * time.Second):
		t.Fatal("no wake-up within 30s of the server's restart")
	}
	req := store.Request{Name: "restart", Token: "t", TTL: time.Minute}
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, err := s.Acquire(ctx, req)
		if err == nil && g.Acquired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire after restart = %+v, %v", g, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	drain(ch)
	if err := s.Release(ctx, req); err != nil {
		t.Fatalf("Release = %v", err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up for a release after the listener reconnected")
	}
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}
