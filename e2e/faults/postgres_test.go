package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
)

// The scenarios of this file make PostgreSQL itself fail (issue 36, its
// PostgreSQL row) under the lease-table store of store/postgres, with the
// workload of T26/T27 (startRun): three looping workers and a holder that
// takes the lock, reads the register and stops itself before its write.
//
//   - T33a/b: crash recovery. The postmaster and its backends are killed
//     with kill -9 and the server restarted on its data directory (a); one
//     backend is killed with kill -9, and the postmaster, as it does then,
//     ends every other backend and reinitialises with crash recovery (b).
//     Every committed grant survives (synchronous_commit on), so exclusion
//     is promised: no two valid leases may overlap.
//   - T33c: a synchronous standby (synchronous_standby_names '*') promoted
//     with pg_ctl promote after the primary is killed. The holder's grant
//     was confirmed by the standby before the holder was told of it, so
//     the promoted standby has it: exclusion promised.
//   - T33d: an asynchronous standby that lagged (its WAL receiver stopped)
//     promoted with pg_promote(). The holder's grant is lost: the others
//     take the lock while its lease is valid (overlaps counted and shown,
//     not promised); fences must still rise (dlock_next_fence takes the
//     clock floor on every grant) and the holder's stale write be refused.
//
// Negative controls: T33d with an unfenced register must accept the stale
// write (T33e); T33d with dlock_next_fence replaced by a counter without the
// clock floor (the worker's -opt fence-rule=counter) must repeat fences
// (T33f).
//
// The workers reach the servers through one libpq multi-host URL naming
// both, with target_session_attrs=read-write: every new connection goes to
// the one that accepts writes, so they follow a promotion as a libpq client
// does. Each run has a database of its own (the control's function is per
// database). The primary and the standby start once for the group; after a
// promotion the old primary is rebuilt (pg_basebackup) as the new one's
// standby on its port, and the roles swap.

func TestFaultsPostgres(t *testing.T) {
	pgtest.Require(t)
	primary := pgtest.Start(t)
	pr := &pgPair{primary: primary, standby: pgtest.StartStandby(t, primary)}
	repeat(t, "T33a_crash_kill_postmaster", func(t *testing.T) { testPGCrash(t, pr, false, false) })
	repeat(t, "T33b_crash_kill_backend", func(t *testing.T) { testPGCrash(t, pr, true, false) })
	repeat(t, "T33g_advisory_crash_kill_postmaster", func(t *testing.T) { testPGCrash(t, pr, false, true) })
	repeat(t, "T33c_promote_sync_standby", func(t *testing.T) { testPGPromote(t, pr, true, true, "") })
	repeat(t, "T33d_promote_async_lagging", func(t *testing.T) { testPGPromote(t, pr, false, true, "") })
	repeat(t, "T33e_promote_async_unfenced_control", func(t *testing.T) { testPGPromote(t, pr, false, false, "") })
	repeat(t, "T33f_promote_async_no_floor_control", func(t *testing.T) { testPGPromote(t, pr, false, true, "counter") })
}

// pgPair is the group's primary and its streaming standby.
type pgPair struct{ primary, standby *pgtest.Server }

// pgCtx is a bounded context for one administrative step.
func pgCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pgURL is a URL for database db on srv alone.
func pgURL(srv *pgtest.Server, db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&connect_timeout=5", srv.Addr(), db)
}

// pgExec runs statements on database db of srv, one connection for all.
func pgExec(t *testing.T, srv *pgtest.Server, db string, stmts ...string) {
	t.Helper()
	ctx := pgCtx(t)
	c, err := pgx.Connect(ctx, pgURL(srv, db))
	if err != nil {
		t.Fatalf("connect to %s/%s: %v", srv.Addr(), db, err)
	}
	defer c.Close(ctx)
	for _, q := range stmts {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s on %s/%s: %v", q, srv.Addr(), db, err)
		}
	}
}

// pgQuery scans one row of q on database db of srv; a query that returns
// no row reports pgx.ErrNoRows.
func pgQuery(ctx context.Context, srv *pgtest.Server, db, q string, args []any, dst ...any) error {
	c, err := pgx.Connect(ctx, pgURL(srv, db))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.QueryRow(ctx, q, args...).Scan(dst...)
}

// pgPoll waits, for at most 30 s, until cond reports true.
func pgPoll(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx := pgCtx(t)
	var last error
	for {
		ok, err := cond(ctx)
		if ok && err == nil {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within 30s (last error: %v)", what, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// setSync makes srv's commits wait for a synchronous standby ('*': any) or
// not, and returns once the setting is in force: with on, once the standby
// is known as synchronous.
func setSync(t *testing.T, srv *pgtest.Server, on bool) {
	t.Helper()
	want := ""
	if on {
		want = "*"
	}
	pgExec(t, srv, "postgres", "ALTER SYSTEM SET synchronous_standby_names = '"+want+"'", "SELECT pg_reload_conf()")
	pgPoll(t, "synchronous_standby_names = '"+want+"'", func(ctx context.Context) (bool, error) {
		var got string
		err := pgQuery(ctx, srv, "postgres", "SHOW synchronous_standby_names", nil, &got)
		return got == want, err
	})
	if on {
		pgPoll(t, "the standby is synchronous", func(ctx context.Context) (bool, error) {
			var n int
			err := pgQuery(ctx, srv, "postgres", "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'", nil, &n)
			return n > 0, err
		})
	}
}

// waitStreaming waits until primary streams WAL to a standby.
func waitStreaming(t *testing.T, primary *pgtest.Server) {
	t.Helper()
	pgPoll(t, "the standby streams from the primary", func(ctx context.Context) (bool, error) {
		var n int
		err := pgQuery(ctx, primary, "postgres", "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'", nil, &n)
		return n > 0, err
	})
}

// newPGEnv makes run t's database on the primary (replicated to the
// standby) with the store's schema, and an env whose workers use the
// postgres store on it through both servers.
func newPGEnv(t *testing.T, pr *pgPair, fenced bool, opts ...string) (*env, string) {
	t.Helper()
	db := strings.ToLower(uniqueKey(t))
	pgExec(t, pr.primary, "postgres", "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	ctx := pgCtx(t)
	s, err := postgres.New(ctx, pgURL(pr.primary, db))
	if err != nil {
		t.Fatalf("schema in %s: %v", db, err)
	}
	s.Close()
	e := newEnvOn(t, fenced)
	e.store = "postgres"
	e.args = []string{"-opt", "hosts=" + pr.primary.Addr() + "," + pr.standby.Addr(), "-opt", "db=" + db}
	for _, o := range opts {
		e.args = append(e.args, "-opt", o)
	}
	return e, db
}

// holderToken returns the token of the live mutex hold on name in db on
// srv, or "" when there is none.
func holderToken(t *testing.T, srv *pgtest.Server, db, name string) string {
	t.Helper()
	var tok string
	err := pgQuery(pgCtx(t), srv, db, "SELECT token FROM dlock_leases WHERE kind = 0 AND name = $1 AND held AND expires_at > clock_timestamp()", []any{name}, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatalf("read the hold of %q on %s: %v", name, srv.Addr(), err)
	}
	return tok
}

// killBackend SIGKILLs one client backend of srv in database db, by PID,
// after checking that the postmaster we started is its parent, and returns
// its PID.
func killBackend(t *testing.T, srv *pgtest.Server, db string) int {
	t.Helper()
	var pid int
	if err := pgQuery(pgCtx(t), srv, "postgres", "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = $1 AND pid <> pg_backend_pid() LIMIT 1", []any{db}, &pid); err != nil {
		t.Fatalf("find a client backend of %s: %v", db, err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	if ppid, _ := strconv.Atoi(string(f[1])); ppid != srv.PID() {
		t.Fatalf("backend %d has parent %d, not our postmaster %d", pid, ppid, srv.PID())
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return pid
}

// T33a/b/g: the primary crashes while the holder holds and comes back by
// crash recovery. The lease table keeps every committed grant, and the
// holder resumes at once. An advisory lock lives in the holder's session,
// which the crash ends: the others take the lock, and the holder resumes
// once one of them has read the register.
func testPGCrash(t *testing.T, pr *pgPair, backendOnly, advisory bool) {
	waitStreaming(t, pr.primary)
	setSync(t, pr.primary, false)
	var opts []string
	if advisory {
		opts = append(opts, "kind=advisory")
	}
	e, db := newPGEnv(t, pr, true, opts...)
	run := pgStartRun(t, e, func() {})
	token := ""
	if advisory {
		var n int
		if err := pgQuery(pgCtx(t), pr.primary, db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())", nil, &n); err != nil || n != 1 {
			t.Fatalf("advisory locks held in %s = %d, %v; want the holder's one", db, n, err)
		}
	} else if token = holderToken(t, pr.primary, db, run.key); token == "" {
		t.Fatal("no live hold on the primary while the holder holds")
	}
	killed := wire.Now()
	if backendOnly {
		crashBackend(t, e, pr.primary, db)
	} else {
		pr.primary.Kill()
		pr.primary.Restart(t)
		store := "the lease table"
		if advisory {
			store = "the advisory-lock store (-opt kind=advisory)"
		}
		e.fault("kill -9 the postmaster and its backends while a holder holds (stopped before its write), restart on the data directory (crash recovery); %s", store)
	}
	back := wire.Now()
	kept := !advisory && hasHold(t, pr.primary, db, run.key, token)
	switch {
	case advisory:
		// The session that held the lock is gone, and the lock with it.
		run.resumeAfterNewHolderRead(t, back)
	case !kept:
		t.Fatalf("after crash recovery the holder's hold is gone: a committed grant was lost (synchronous_commit on)")
	default:
		run.holder.resume()
	}
	e.waitAll(3 * time.Minute)
	finishPGRun(t, e, run, killed, back, kept)
}

// crashBackend kills one client backend of srv with kill -9 and waits
// until the postmaster has ended the others and is back from crash
// recovery.
func crashBackend(t *testing.T, e *env, srv *pgtest.Server, db string) {
	t.Helper()
	// A connection of our own shows when the postmaster has ended every
	// backend (it is one of them).
	ctx := pgCtx(t)
	probe, err := pgx.Connect(ctx, pgURL(srv, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	pid := killBackend(t, srv, db)
	e.fault("kill -9 one client backend (PID %d) while a holder holds (stopped before its write): the postmaster ends every other backend and reinitialises with crash recovery", pid)
	pgPoll(t, "the postmaster ends the other backends", func(ctx context.Context) (bool, error) {
		_, err := probe.Exec(ctx, "SELECT 1")
		return err != nil, nil
	})
	pgPoll(t, "the primary is back after its crash restart", func(ctx context.Context) (bool, error) {
		var rec bool
		err := pgQuery(ctx, srv, db, "SELECT pg_is_in_recovery()", nil, &rec)
		return !rec, err
	})
}

// T33c-f: the primary is killed while the holder holds and the standby
// promoted; sync: the standby confirmed every grant; else its WAL receiver
// was stopped before the holder's grant (it lags).
func testPGPromote(t *testing.T, pr *pgPair, sync, fenced bool, fenceRule string) {
	old, sb := pr.primary, pr.standby
	waitStreaming(t, old)
	setSync(t, old, sync)
	var opts []string
	if fenceRule != "" {
		opts = append(opts, "fence-rule="+fenceRule)
	}
	e, db := newPGEnv(t, pr, fenced, opts...)
	promoted := false
	t.Cleanup(func() {
		if promoted {
			old.Rebuild(t, sb)
			pr.primary, pr.standby = sb, old
			return
		}
		// A run that ended before its promotion (the standby may be cut
		// off, the primary killed) leaves the pair streaming again.
		if old.PID() == 0 {
			old.Restart(t)
		}
		sb.Rebuild(t, old)
	})
	mark := func() {}
	if !sync {
		mark = func() { cutStandby(t, old, sb) }
	}
	run := pgStartRun(t, e, mark)
	if fenceRule != "" {
		run.clockLib = "fence-rule=" + fenceRule // a no-floor control: any read counts in resumeAfterNewHolderRead
	}
	token := holderToken(t, old, db, run.key)
	if token == "" {
		t.Fatal("no live hold on the primary while the holder holds")
	}
	before := fenceRow(t, old, db, run.key)
	killed := wire.Now()
	old.Kill()
	// What the standby will be promoted with, read while it is still read
	// only (no worker can write there yet): everything it received,
	// replayed.
	kept, stale := standbyHolds(t, sb, db, run.key, token)
	if sync && (!kept || stale != before) {
		t.Fatalf("the synchronous standby has the holder's hold %v and fence %d, want the hold and fence %d: a confirmed grant was lost", kept, stale, before)
	}
	if !sync && (kept || stale >= before) {
		t.Fatalf("the standby has the holder's hold %v and fence %d (the primary's %d): it did not lag, the run tests nothing", kept, stale, before)
	}
	began := wire.Now()
	how := promote(t, sb, sync)
	promoted = true
	at := wire.Now()
	t.Logf("the promotion itself took %v (kill to promoted %v)", time.Duration(at-began).Round(time.Millisecond), time.Duration(at-killed).Round(time.Millisecond))
	switch {
	case fenceRule != "":
		how += "; dlock_next_fence a counter without the clock floor (-opt fence-rule=" + fenceRule + ")"
	case !fenced:
		how += "; the register ignores fences"
	}
	e.fault("%s; workers follow through a multi-host URL with target_session_attrs=read-write", how)
	if sync {
		run.holder.resume()
	} else {
		run.resumeAfterNewHolderRead(t, at)
	}
	e.waitAll(3 * time.Minute)
	finishPGRun(t, e, run, killed, at, kept)
}

// fenceRow returns the fence row of name in db on srv.
func fenceRow(t *testing.T, srv *pgtest.Server, db, name string) int64 {
	t.Helper()
	var f int64
	if err := pgQuery(pgCtx(t), srv, db, "SELECT fence FROM dlock_locks WHERE kind = -1 AND name = $1", []any{name}, &f); err != nil {
		t.Fatalf("the fence row of %q on %s: %v", name, srv.Addr(), err)
	}
	return f
}

// standbyHolds waits until the standby sb has replayed all the WAL it
// received, then reports whether it has the hold of token on name (expired
// or not) and its fence row.
func standbyHolds(t *testing.T, sb *pgtest.Server, db, name, token string) (bool, int64) {
	t.Helper()
	pgPoll(t, "the standby replays what it received", func(ctx context.Context) (bool, error) {
		var ok bool
		err := pgQuery(ctx, sb, "postgres", "SELECT pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()", nil, &ok)
		return ok, err
	})
	return hasHold(t, sb, db, name, token), fenceRow(t, sb, db, name)
}

// hasHold reports whether srv has the hold of token on name in db, expired
// or not (an expired row is deleted by the next acquire of the name).
func hasHold(t *testing.T, srv *pgtest.Server, db, name, token string) bool {
	t.Helper()
	var held bool
	if err := pgQuery(pgCtx(t), srv, db, "SELECT EXISTS (SELECT 1 FROM dlock_leases WHERE kind = 0 AND name = $1 AND token = $2 AND held)", []any{name, token}, &held); err != nil {
		t.Fatalf("read the hold of %q on %s: %v", name, srv.Addr(), err)
	}
	return held
}

// promote promotes the standby (pg_ctl promote for a synchronous one,
// SELECT pg_promote() otherwise, so both ways run) and describes the fault.
func promote(t *testing.T, sb *pgtest.Server, sync bool) string {
	t.Helper()
	// The standby's own settings (a rebuilt one copied its primary's) must
	// not make the new primary wait for a standby it does not have.
	pgExec(t, sb, "postgres", "ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()")
	if sync {
		if err := sb.Promote(); err != nil {
			t.Fatal(err)
		}
		return "synchronous standby (synchronous_standby_names '*', synchronous_commit on); kill -9 the primary while a holder holds (stopped before its write); pg_ctl promote the standby"
	}
	var ok bool
	if err := pgQuery(pgCtx(t), sb, "postgres", "SELECT pg_promote(true, 60)", nil, &ok); err != nil || !ok {
		t.Fatalf("pg_promote = %v, %v", ok, err)
	}
	return "asynchronous standby whose WAL receiver was stopped (primary_conninfo emptied) after it replayed the workers' grants; a holder takes the lock on the primary only and stops before its write; kill -9 the primary; SELECT pg_promote() on the standby"
}

// cutStandby waits until sb has replayed everything old has written, then
// stops its WAL receiver (primary_conninfo emptied and reloaded), so that
// it lags from here on.
func cutStandby(t *testing.T, old, sb *pgtest.Server) {
	t.Helper()
	ctx := pgCtx(t)
	oc, err := pgx.Connect(ctx, pgURL(old, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close(ctx)
	sc, err := pgx.Connect(ctx, pgURL(sb, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(ctx)
	var lsn string
	if err := oc.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	pgPoll(t, "the standby replays the primary's WAL", func(ctx context.Context) (bool, error) {
		var ok bool
		err := sc.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&ok)
		return ok, err
	})
	for _, q := range []string{"ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"} {
		if _, err := sc.Exec(ctx, q); err != nil {
			t.Fatalf("%s on the standby: %v", q, err)
		}
	}
	pgPoll(t, "the standby's WAL receiver stops", func(ctx context.Context) (bool, error) {
		var n int
		err := sc.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&n)
		return n == 0, err
	})
}

// pgHolderTTL is the holder's TTL: longer than T26/T27's 5 s, so that its
// lease is still valid when a crash restart or a promotion on a loaded
// machine is over (both took 2-8 s here), and the scenarios where the store
// keeps the grant test exclusion rather than an expired lease.
const pgHolderTTL = 15 * time.Second

// pgStartRun is startRun (T26/T27) with more grants per looper (a
// PostgreSQL grant is quicker than cutting a standby off, so 24 could all
// be spent before the holder gets the lock) and the holder's TTL
// pgHolderTTL.
func pgStartRun(t *testing.T, e *env, mark func()) *storeRun {
	t.Helper()
	run := &storeRun{e: e, key: uniqueKey(t)}
	iters := 48
	if long() {
		iters = 150
	}
	for i := range 3 {
		run.loopers = append(run.loopers, e.spawn(i+1, "-key", run.key,
			"-ttl", looperTTL.String(), "-autorenew", "-careful", "-op-timeout", "300ms", "-wait", "30s",
			"-iters", strconv.Itoa(iters), "-duration", "2m", "-rmw", "-hold", "5ms", "-gap", "25ms"))
	}
	w1 := run.loopers[0]
	if _, ok := w1.waitEvent(30*time.Second, func(ev wire.Event) bool { return ev.Kind == wire.KindAcquire && ev.Iter >= 5 }); !ok {
		t.Fatalf("worker 1 made no progress\n%s", w1.stderrText())
	}
	mark()
	run.holder = e.spawn(holderID, "-key", run.key, "-ttl", pgHolderTTL.String(), "-wait", "30s", "-iters", "1", "-rmw",
		"-stop-iter", "0", "-stop-at", "write")
	run.holder.waitStopped(30 * time.Second)
	for _, w := range run.loopers {
		if _, done := w.waitEvent(0, isKind(wire.KindDone)); done {
			t.Fatalf("worker %d ended its %d grants before the holder got the lock: the fault would strike no workload", w.id, iters)
		}
	}
	return run
}

// pgValidOverlaps is validOverlaps with the holder's TTL pgHolderTTL.
func pgValidOverlaps(evs []wire.Event) int {
	gs := grants(evs)
	ttl := func(g grant) time.Duration {
		if g.W == holderID {
			return pgHolderTTL
		}
		return looperTTL
	}
	n := 0
	for i := range gs {
		for j := i + 1; j < len(gs); j++ {
			a, b := gs[i], gs[j]
			if a.W != b.W && a.Enter < validEnd(b, evs, ttl(b), 0.01) && b.Enter < validEnd(a, evs, ttl(a), 0.01) {
				n++
			}
		}
	}
	return n
}

// finishPGRun measures and judges a T33 run. Where the store kept the
// holder's grant it promises exclusion: overlaps of valid leases must be 0;
// where it lost the grant they are counted and shown, and must be there
// (the control of the exclusion check). A treatment must be
// safe and, where the grant was lost, must have refused the holder's stale
// write; a no-floor control must repeat fences; an unfenced control must
// accept the stale write.
func finishPGRun(t *testing.T, e *env, run *storeRun, killed, back int64, kept bool) {
	t.Helper()
	evs := e.history()
	r := e.measure()
	r.Promise = "not promised"
	if kept {
		r.Promise = "none promised"
	}
	valid := pgValidOverlaps(evs)
	before, after := fencesAround(evs, killed)
	r.Extra = fmt.Sprintf("kill to accepting writes again %v; holder's grant kept: %v; overlaps of valid leases %d; max fence before the kill %d, min after %d (%+d)",
		time.Duration(back-killed).Round(time.Millisecond), kept, valid, before, after, after-before)
	switch {
	case run.clockLib != "":
		requireDetected(t, "fence repeats ("+run.clockLib+")", r.FenceDups)
	case !e.reg.fenced:
		requireDetected(t, "stale writes accepted (unfenced register)", r.StaleAccepted)
		requireDetected(t, "lost updates (unfenced register)", r.Lost)
	default:
		requireSafe(t, r)
		if r.Lost != 0 {
			t.Errorf("lost updates = %d, want 0", r.Lost)
		}
		if !kept && r.StaleRejected == 0 {
			t.Errorf("stale writes rejected = 0, want >= 1: the holder whose grant the store lost wrote after the next holder read, and its write must be refused")
		}
	}
	if kept && valid != 0 {
		t.Errorf("overlaps of valid leases = %d, want 0: the store kept the grant", valid)
	}
	if !kept {
		// The checker that the runs keeping the grant pass must see the
		// overlap a lost grant lets in: the holder's 15 s lease was valid
		// when the next holder entered (a fault under 15 s).
		requireDetected(t, "overlaps of valid leases (the holder's grant was lost)", valid)
	}
	e.record(r)
}
