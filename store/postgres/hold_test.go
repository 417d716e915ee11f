package postgres_test

import (
	_ "embed"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
)

// Issue 38 on the lease table: a hold's record, MinHold, MaxHold, Resume
// and ForceRelease, checked on the rows by the database's clock.

func mustGrant(t *testing.T, s store.Store, req store.Request) store.Grant {
	t.Helper()
	g, err := s.Acquire(t.Context(), req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire(%s, %s, %v) = %+v, %v; want a grant", req.Name, req.Token, req.Mode, g, err)
	}
	return g
}

func mustRefuse(t *testing.T, s store.Store, req store.Request) store.Grant {
	t.Helper()
	g, err := s.Acquire(t.Context(), req)
	if err != nil || g.Acquired {
		t.Fatalf("Acquire(%s, %s, %v) = %+v, %v; want a refusal", req.Name, req.Token, req.Mode, g, err)
	}
	return g
}

// grantedWithin polls Acquire(req) until it is granted, failing t after d.
func grantedWithin(t *testing.T, s store.Store, req store.Request, d time.Duration) store.Grant {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		g, err := s.Acquire(t.Context(), req)
		if err == nil && g.Acquired {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire(%s, %s) = %+v, %v; still not granted after %v", req.Name, req.Token, g, err, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOwner checks that st has one Owner, with the record of req granted
// fence in [before, after] by this machine's clock (the test's server runs
// on it).
func checkOwner(t *testing.T, st store.State, req store.Request, fence int64, before, after time.Time) {
	t.Helper()
	if len(st.Owners) != 1 || st.Holders != 1 {
		t.Fatalf("State(%s) = %+v; want one holder and one Owner", st.Name, st)
	}
	o := st.Owners[0]
	if o.Owner != req.Holder || o.Data != req.Data || o.Fence != fence {
		t.Errorf("State(%s).Owners[0] = %+v; want Owner %q, Data %q, Fence %d", st.Name, o, req.Holder, req.Data, fence)
	}
	if lo := before.Truncate(time.Millisecond); o.Since.Before(lo) || o.Since.After(after) || o.Since.Nanosecond()%int(time.Millisecond) != 0 {
		t.Errorf("State(%s).Owners[0].Since = %v; want the grant, to the millisecond, in [%v, %v]", st.Name, o.Since, lo, after)
	}
}

func TestHoldRecord(t *testing.T) {
	srv := pgtest.Start(t)
	s := newStore(t, srv.URL())
	ctx := ctxT(t)

	req := store.Request{Name: "rec", Token: "t1", TTL: time.Minute, Holder: "host/1", Data: `{"job":7}`}
	before := time.Now()
	g := mustGrant(t, s, req)
	after := time.Now()
	st, err := s.State(ctx, req.Name)
	if err != nil {
		t.Fatal(err)
	}
	checkOwner(t, st, req, g.Fence, before, after)
	// A repeat by the holder keeps the first record.
	mustGrant(t, s, store.Request{Name: req.Name, Token: "t1", TTL: time.Minute, Holder: "other", Data: "x"})
	st, _ = s.State(ctx, req.Name)
	checkOwner(t, st, req, g.Fence, before, after)
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || len(list[0].Owners) != 1 || list[0].Owners[0] != st.Owners[0] {
		t.Errorf("List = %+v, %v; want the one lock with State's Owners %+v", list, err, st.Owners)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.State(ctx, req.Name); st.Holders != 0 || len(st.Owners) != 0 {
		t.Errorf("State after Release = %+v; want no holders, no Owners", st)
	}

	// A reentrant hold is one Owner, the first grant's record.
	re := store.Request{Name: "rec-re", Token: "r1", TTL: time.Minute, Mode: store.ModeReentrant, Owner: "o", Holder: "first", Data: "d1"}
	before = time.Now()
	g = mustGrant(t, s, re)
	after = time.Now()
	mustGrant(t, s, store.Request{Name: re.Name, Token: "r2", TTL: time.Minute, Mode: store.ModeReentrant, Owner: "o", Holder: "second", Data: "d2"})
	st, _ = s.State(ctx, re.Name)
	checkOwner(t, st, re, g.Fence, before, after)

	// Each permit its own.
	for _, who := range []string{"p1", "p2"} {
		mustGrant(t, s, store.Request{Name: "rec-sem", Token: who, TTL: time.Minute, Mode: store.ModeSemaphore, Limit: 3, Holder: who})
	}
	st, _ = s.State(ctx, "rec-sem")
	if st.Holders != 2 || len(st.Owners) != 2 || st.Owners[0].Owner == st.Owners[1].Owner {
		t.Errorf("State(rec-sem) = %+v; want two Owners p1 and p2", st)
	}

	// Bad records change nothing.
	bad := store.Request{Name: "rec-bad", Token: "b", TTL: time.Minute, Data: strings.Repeat("x", store.MaxDataLen+1)}
	var inv *store.InvalidError
	if _, err := s.Acquire(ctx, bad); !errors.As(err, &inv) || inv.Field != "data" {
		t.Errorf("Acquire with %d bytes of data = %v; want an InvalidError for data", len(bad.Data), err)
	}
	if st, _ := s.State(ctx, bad.Name); st.Holders != 0 {
		t.Errorf("State after a refused record = %+v; want nothing held", st)
	}
}

// minHoldWait is the MinHold the tests wait out: long enough that the checks
// made right after a release certainly fall inside it.
const minHoldWait = 3 * time.Second

func TestHoldMinHold(t *testing.T) {
	srv := pgtest.Start(t)
	s := newStore(t, srv.URL())
	ctx := ctxT(t)
	for _, m := range []store.Mode{store.ModeMutex, store.ModeFair, store.ModeElection} {
		t.Run(m.String(), func(t *testing.T) {
			name := "min-" + m.String()
			req := store.Request{Name: name, Token: "a", TTL: time.Minute, Mode: m, MinHold: minHoldWait, Holder: "job"}
			g := mustGrant(t, s, req)
			if err := s.Release(ctx, req); err != nil {
				t.Fatalf("Release before the min hold = %v; want nil", err)
			}
			other := store.Request{Name: name, Token: "b", TTL: time.Minute, Mode: m}
			r := mustRefuse(t, s, other)
			if r.RetryAfter <= 0 || r.RetryAfter > minHoldWait {
				t.Errorf("refusal after the early release: RetryAfter %v; want (0, %v]", r.RetryAfter, minHoldWait)
			}
			// Nobody holds it: the token can neither extend, resume nor release it.
			if errs := s.Extend(ctx, []store.Request{req}); !errors.Is(errs[0], store.ErrNotHeld) {
				t.Errorf("Extend after release = %v; want ErrNotHeld", errs[0])
			}
			if _, err := s.Resume(ctx, req); !errors.Is(err, store.ErrNotHeld) {
				t.Errorf("Resume after release = %v; want ErrNotHeld", err)
			}
			if err := s.Release(ctx, req); !errors.Is(err, store.ErrNotHeld) {
				t.Errorf("second Release = %v; want ErrNotHeld", err)
			}
			if _, err := s.Acquire(ctx, store.Request{Name: name, Token: "", TTL: time.Minute, Mode: m}); err == nil {
				t.Errorf("Acquire with an empty token = nil error; want an InvalidError")
			}
			st, _ := s.State(ctx, name)
			if st.Holders != 1 || len(st.Owners) != 1 || st.Owners[0].Owner != "job" || st.TTL > minHoldWait {
				t.Errorf("State in the min hold = %+v; want the kept hold, its record, TTL <= %v", st, minHoldWait)
			}
			g2 := grantedWithin(t, s, other, 30*time.Second)
			if g2.Fence <= g.Fence {
				t.Errorf("fence after the min hold = %d; want above %d", g2.Fence, g.Fence)
			}
		})
	}
	t.Run("PassedFreesAtOnce", func(t *testing.T) {
		req := store.Request{Name: "min-passed", Token: "a", TTL: time.Minute, MinHold: time.Millisecond}
		mustGrant(t, s, req)
		time.Sleep(5 * time.Millisecond) // past the 1ms min hold by any clock
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
		mustGrant(t, s, store.Request{Name: req.Name, Token: "b", TTL: time.Minute})
	})
	t.Run("SharedIgnore", func(t *testing.T) {
		for _, m := range []store.Mode{store.ModeSemaphore, store.ModeRead, store.ModeReentrant, store.ModeWrite} {
			name := "min-shared-" + m.String()
			req := store.Request{Name: name, Token: "a", TTL: time.Minute, Mode: m, Limit: 1, MinHold: minHoldWait}
			mustGrant(t, s, req)
			if err := s.Release(ctx, req); err != nil {
				t.Fatal(err)
			}
			mustGrant(t, s, store.Request{Name: name, Token: "b", TTL: time.Minute, Mode: m, Limit: 1})
		}
	})
}

func TestHoldMaxHold(t *testing.T) {
	srv := pgtest.Start(t)
	s := newStore(t, srv.URL())
	ctx := ctxT(t)
	const maxHold = 2 * time.Second
	for _, m := range []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeSemaphore} {
		t.Run(m.String(), func(t *testing.T) {
			req := store.Request{Name: "max-" + m.String(), Token: "a", TTL: time.Minute, Mode: m, Limit: 1, MaxHold: maxHold}
			mustGrant(t, s, req)
			if st, _ := s.State(ctx, req.Name); st.TTL <= 0 || st.TTL > maxHold {
				t.Errorf("State after the grant: TTL %v; want capped to (0, %v]", st.TTL, maxHold)
			}
			if errs := s.Extend(ctx, []store.Request{req}); errs[0] != nil {
				t.Fatalf("Extend = %v", errs[0])
			}
			if st, _ := s.State(ctx, req.Name); st.TTL > maxHold {
				t.Errorf("State after Extend(1m): TTL %v; want capped to %v", st.TTL, maxHold)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				errs := s.Extend(ctx, []store.Request{req})
				if errors.Is(errs[0], store.ErrNotHeld) {
					break
				}
				if errs[0] != nil || time.Now().After(deadline) {
					t.Fatalf("Extend = %v; want ErrNotHeld once the max hold ran out", errs[0])
				}
				time.Sleep(50 * time.Millisecond)
			}
			mustGrant(t, s, store.Request{Name: req.Name, Token: "b", TTL: time.Minute, Mode: m, Limit: 1})
		})
	}
}

func TestHoldResume(t *testing.T) {
	srv := pgtest.Start(t)
	s, other := newStore(t, srv.URL()), newStore(t, srv.URL())
	ctx := ctxT(t)
	req := store.Request{Name: "resume", Token: "a", TTL: 5 * time.Second, MaxHold: time.Hour}
	g := mustGrant(t, s, req)
	req.TTL = time.Minute
	r, err := other.Resume(ctx, req) // another process, by the token
	if err != nil || !r.Acquired || r.Fence != g.Fence || r.TTL != time.Minute || r.MaxHoldLeft <= 59*time.Minute || r.MaxHoldLeft > time.Hour {
		t.Errorf("Resume = %+v, %v; want fence %d, TTL 1m, MaxHoldLeft just under 1h", r, err, g.Fence)
	}
	if st, _ := s.State(ctx, req.Name); st.TTL <= 5*time.Second {
		t.Errorf("State after Resume(1m): TTL %v; want extended", st.TTL)
	}
	for _, bad := range []store.Request{
		{Name: req.Name, Token: "zz", TTL: time.Minute},
		{Name: req.Name, Token: "a", TTL: time.Minute, Mode: store.ModeFair},
		{Name: req.Name, Token: "a", TTL: time.Minute, Mode: store.ModeReentrant},
		{Name: "resume-none", Token: "a", TTL: time.Minute},
	} {
		if g, err := other.Resume(ctx, bad); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Resume(%s, %s, %v) = %+v, %v; want ErrNotHeld", bad.Name, bad.Token, bad.Mode, g, err)
		}
	}
	// Capped by the max hold.
	capped := store.Request{Name: "resume-cap", Token: "c", TTL: time.Minute, MaxHold: 10 * time.Second}
	mustGrant(t, s, capped)
	if r, err := s.Resume(ctx, capped); err != nil || r.TTL > 10*time.Second || r.MaxHoldLeft > 10*time.Second || r.MaxHoldLeft <= 0 {
		t.Errorf("Resume(1m) with a 10s max hold = %+v, %v; want TTL and MaxHoldLeft in (0, 10s]", r, err)
	}
	// A reentrant hold's count.
	re := store.Request{Name: "resume-re", Token: "r1", TTL: time.Minute, Mode: store.ModeReentrant, Owner: "o"}
	mustGrant(t, s, re)
	mustGrant(t, s, store.Request{Name: re.Name, Token: "r2", TTL: time.Minute, Mode: store.ModeReentrant, Owner: "o"})
	if r, err := other.Resume(ctx, re); err != nil || r.Count != 2 {
		t.Errorf("Resume(reentrant) = %+v, %v; want Count 2", r, err)
	}
	// Read and write share a kind: the mode must match.
	rd := store.Request{Name: "resume-rw", Token: "rd", TTL: time.Minute, Mode: store.ModeRead}
	mustGrant(t, s, rd)
	if _, err := other.Resume(ctx, store.Request{Name: rd.Name, Token: rd.Token, TTL: time.Minute, Mode: store.ModeWrite}); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Resume(write) of a read hold = %v; want ErrNotHeld", err)
	}
	if r, err := other.Resume(ctx, rd); err != nil || r.Count != 1 {
		t.Errorf("Resume(read) = %+v, %v; want a grant", r, err)
	}
	// Expired: not held.
	short := store.Request{Name: "resume-expired", Token: "e", TTL: 100 * time.Millisecond}
	mustGrant(t, s, short)
	time.Sleep(300 * time.Millisecond)
	if _, err := s.Resume(ctx, short); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Resume after the TTL ran out = %v; want ErrNotHeld", err)
	}
}

func TestHoldForceRelease(t *testing.T) {
	srv := pgtest.Start(t)
	s, w := newStore(t, srv.URL()), newStore(t, srv.URL())
	ctx := ctxT(t)

	// A fair hold released into its min hold, with a waiter queued behind.
	held := store.Request{Name: "force", Token: "a", TTL: time.Minute, Mode: store.ModeFair, MinHold: time.Hour, Holder: "stuck", Data: "d"}
	g := mustGrant(t, s, held)
	if err := s.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	waiter := store.Request{Name: held.Name, Token: "w", TTL: time.Minute, Mode: store.ModeFair, Queue: true, QueueTTL: time.Minute}
	mustRefuse(t, s, waiter)
	ch, stop, err := w.Watch(ctx, held.Name, store.ModeMutex)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	drain(ch)

	ended, err := s.ForceRelease(ctx, held.Name)
	if err != nil || len(ended) != 1 || ended[0].Owner != "stuck" || ended[0].Data != "d" || ended[0].Fence != g.Fence || ended[0].Since.IsZero() {
		t.Fatalf("ForceRelease = %+v, %v; want the one hold: stuck, d, fence %d", ended, err, g.Fence)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Error("no wake-up within 10s of ForceRelease")
	}
	st, _ := s.State(ctx, held.Name)
	if st.Holders != 0 || st.Queue != 1 {
		t.Errorf("State after ForceRelease = %+v; want no holder, the waiter's place kept", st)
	}
	g2 := mustGrant(t, s, waiter)
	if g2.Fence <= g.Fence {
		t.Errorf("the waiter's fence %d; want above the forced hold's %d", g2.Fence, g.Fence)
	}
	if ended, err := s.ForceRelease(ctx, "force-none"); err != nil || len(ended) != 0 {
		t.Errorf("ForceRelease of a free name = %+v, %v; want none, nil", ended, err)
	}

	// Every reader, and a reentrant hold once.
	for _, tok := range []string{"r1", "r2"} {
		mustGrant(t, s, store.Request{Name: "force-rw", Token: tok, TTL: time.Minute, Mode: store.ModeRead, Holder: tok})
	}
	if ended, err := s.ForceRelease(ctx, "force-rw"); err != nil || len(ended) != 2 {
		t.Errorf("ForceRelease of two readers = %+v, %v; want both", ended, err)
	}
	for _, tok := range []string{"e1", "e2"} {
		mustGrant(t, s, store.Request{Name: "force-re", Token: tok, TTL: time.Minute, Mode: store.ModeReentrant, Owner: "o"})
	}
	if ended, err := s.ForceRelease(ctx, "force-re"); err != nil || len(ended) != 1 {
		t.Errorf("ForceRelease of a reentrant hold = %+v, %v; want one", ended, err)
	}
	if err := s.Release(ctx, store.Request{Name: "force-re", Token: "e1", Mode: store.ModeReentrant}); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release by a forced holder = %v; want ErrNotHeld", err)
	}
}

//go:embed testdata/schema5.sql
var schema5 string

// TestHoldMigrateFrom5 checks that schema 6 migrates a database of schema
// 5 in place: holds taken before stay held (their holder unknown), and
// processes of the earlier version, which call dlock_acquire and
// dlock_release, keep working beside upgraded ones.
func TestHoldMigrateFrom5(t *testing.T) {
	srv := pgtest.Start(t)
	c := connect(t, srv.URL())
	ctx := ctxT(t)
	if _, err := c.Exec(ctx, schema5); err != nil {
		t.Fatalf("schema 5 = %v", err)
	}
	old := func(name, token string) string {
		var status string
		if err := c.QueryRow(ctx, "SELECT o_status FROM dlock_acquire(0::smallint, $1, $2, 0::smallint, '', 0, 60000, false, 0)", name, token).Scan(&status); err != nil {
			t.Fatalf("dlock_acquire of schema 5 = %v", err)
		}
		return status
	}
	if st := old("mig", "old"); st != "acquired" {
		t.Fatalf("dlock_acquire(mig) before the upgrade = %s", st)
	}
	s := newStore(t, srv.URL()) // migrates
	st, err := s.State(ctx, "mig")
	if err != nil || st.Holders != 1 || len(st.Owners) != 1 || st.Owners[0].Owner != "" || !st.Owners[0].Since.IsZero() {
		t.Errorf("State of a schema-5 hold = %+v, %v; want one holder, owner unknown", st, err)
	}
	mustRefuse(t, s, store.Request{Name: "mig", Token: "new", TTL: time.Minute})
	// An earlier process still takes and releases through its functions.
	if st := old("mig2", "old"); st != "acquired" {
		t.Errorf("dlock_acquire(mig2) after the upgrade = %s", st)
	}
	var ok bool
	if err := c.QueryRow(ctx, "SELECT dlock_release(0::smallint, 'mig', 'old')").Scan(&ok); err != nil || !ok {
		t.Errorf("dlock_release of schema 5 after the upgrade = %v, %v", ok, err)
	}
	mustGrant(t, s, store.Request{Name: "mig", Token: "new", TTL: time.Minute, Holder: "new"})
	// An earlier process starting now finds its version and migrates nothing.
	var have string
	if err := c.QueryRow(ctx, "SELECT obj_description(to_regproc('dlock_acquire'), 'pg_proc')").Scan(&have); err != nil || have != "dlock schema 5" {
		t.Errorf("the comment schema-5 processes check = %q, %v; want dlock schema 5", have, err)
	}
	if err := postgres.Migrate(ctx, s.Pool()); err != nil {
		t.Errorf("Migrate again = %v", err)
	}
}
