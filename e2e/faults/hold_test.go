package faults

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
)

// The scenarios of this file put issue 38's mechanisms through the store
// fault suite, with real worker processes and the history checkers:
//
//   - T34, resume through a crash: a worker holding the lock with
//     auto-renewal persists its token (-token-file) and is kill -9'd mid-hold;
//     a new process resumes the lease by that token (Locker.Resume,
//     -resume-file) and read-modify-writes the fenced register under the
//     resumed fence while three loopers contend. The resumed grant is the
//     killed one's lease: its fence must be the persisted one and above every
//     other grant that returned before the resume was asked for, no other
//     grant may repeat it, and no two leases may be valid at once (the killed
//     holder's and its resumption count as one). Negative control (T34c): a
//     "resume" that trusts the persisted token without confirming on the
//     store, made after the hold ran out and another worker took the lock:
//     its fence is below a grant made before it (caught), and its write is
//     refused; a real Resume at the same moment gets ErrNotHeld and writes
//     nothing.
//   - T35, a min hold through a store restart: three workers fire a job
//     (TryLock, one fenced write, release at once) every 50 ms with
//     WithMinHold(interval); the node is kill -9'd and restarted right after
//     a job's early release, while the min hold keeps the name. No two job
//     starts may fall within one interval (a grant returned less than the
//     interval after the previous one was asked for), and fences must rise.
//     With AOF always the kept name comes back with its expiry; restarted
//     without persistence it does not, and the next job starts at once
//     (T35b, a row that shows what a store that forgets does: the min hold
//     is kept by the store, and a store that forgets it forgets it).

func TestFaultsHold(t *testing.T) {
	t.Run("T34_resume", func(t *testing.T) {
		aof := testredis.Start(t, testredis.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
		repeat(t, "T34a_resume_after_kill_valkey_aof_always", func(t *testing.T) {
			testResume(t, newEnvOn(t, true, aof), false)
		})
		repeat(t, "T34c_resume_unconfirmed_control", func(t *testing.T) {
			testResume(t, newEnvOn(t, true, aof), true)
		})
		t.Run("postgres", func(t *testing.T) {
			pgtest.Require(t)
			srv := pgtest.Start(t)
			repeat(t, "T34b_resume_after_kill_postgres", func(t *testing.T) {
				testResume(t, newPGSingleEnv(t, srv), false)
			})
		})
	})
	t.Run("T35_min_hold", func(t *testing.T) {
		aof := testredis.Start(t, testredis.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
		repeat(t, "T35a_min_hold_restart_aof_always", func(t *testing.T) { testMinHoldRestart(t, aof, true) })
		none := testredis.Start(t)
		repeat(t, "T35b_min_hold_restart_no_persistence_shown", func(t *testing.T) { testMinHoldRestart(t, none, false) })
	})
}

// newPGSingleEnv makes run t's database on srv with the store's schema and
// an env whose workers use the lease table there.
func newPGSingleEnv(t *testing.T, srv *pgtest.Server) *env {
	t.Helper()
	db := strings.ToLower(uniqueKey(t))
	pgExec(t, srv, "postgres", "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	s, err := postgres.New(pgCtx(t), pgURL(srv, db))
	if err != nil {
		t.Fatalf("schema in %s: %v", db, err)
	}
	s.Close()
	e := newEnvOn(t, true)
	e.store = "postgres"
	e.args = []string{"-opt", "hosts=" + srv.Addr(), "-opt", "db=" + db}
	return e
}

const (
	resumeHolderID  = 9
	resumerID       = 10
	lateResumerID   = 11
	resumeTTL       = 6 * time.Second // the holder's and the resumer's
	resumeLooperTTL = 2 * time.Second
)

// testResume: three loopers contend on the lock; the holder (auto-renewed,
// TTL 6s) takes it, persists its token, reads the register and holds; after
// its first renewal it is kill -9'd; a new process resumes its lease from
// the token file at once and read-modify-writes under it. In the control,
// the holder's hold runs out first and a looper reads under a later grant;
// then one process "resumes" without asking the store and writes with the
// persisted fence, and another resumes for real.
func testResume(t *testing.T, e *env, control bool) {
	t0 := wire.Now()
	k := uniqueKey(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	loopFor := 15 * time.Second
	if long() {
		loopFor = 60 * time.Second
	}
	var loopers []*worker
	for i := range 3 {
		loopers = append(loopers, e.spawn(i+1, "-key", k, "-ttl", resumeLooperTTL.String(), "-autorenew", "-careful",
			"-op-timeout", "500ms", "-wait", "30s", "-iters", "100000", "-duration", loopFor.String(),
			"-rmw", "-hold", "5ms", "-gap", "25ms"))
	}
	if _, ok := loopers[0].waitEvent(60*time.Second, func(ev wire.Event) bool { return ev.Kind == wire.KindAcquire && ev.Iter >= 3 }); !ok {
		t.Fatalf("worker 1 made no progress\n%s", loopers[0].stderrText())
	}
	holder := e.spawn(resumeHolderID, "-key", k, "-ttl", resumeTTL.String(), "-autorenew", "-wait", "30s", "-iters", "1",
		"-rmw", "-hold", "10m", "-token-file", tokenFile)
	acq, ok := holder.waitEvent(60*time.Second, isKind(wire.KindAcquire))
	if !ok {
		t.Fatalf("the holder got no grant\n%s", holder.stderrText())
	}
	if _, ok := holder.waitEvent(60*time.Second, func(ev wire.Event) bool { return ev.Kind == wire.KindRenew && ev.Result == "ok" }); !ok {
		t.Fatalf("the holder's lease was never renewed\n%s", holder.stderrText())
	}
	if _, ok := holder.waitEvent(60*time.Second, func(ev wire.Event) bool { return ev.Kind == wire.KindRead && ev.Accepted }); !ok {
		t.Fatalf("the holder did not read under its grant\n%s", holder.stderrText())
	}
	t.Logf("holder granted fence %d at %s, renewed and read; kill -9 at %s", acq.Fence, time.Duration(acq.T-t0), time.Duration(wire.Now()-t0))
	holder.crash()
	killed := wire.Now()
	resumerArgs := []string{"-key", k, "-ttl", resumeTTL.String(), "-autorenew", "-careful", "-wait", "30s", "-resume-file", tokenFile}
	var resumer *worker
	if !control {
		e.fault("kill -9 a holder (auto-renewed, TTL %s) mid-hold after a renewal; a new process resumes its lease by the persisted token at once and read-modify-writes under it, then acquires 3 times more; 3 loopers contend throughout", resumeTTL)
		resumer = e.spawn(resumerID, append(resumerArgs, "-iters", "4", "-rmw", "-hold", "5ms", "-gap", "25ms")...)
	} else {
		e.fault("kill -9 a holder (auto-renewed, TTL %s) mid-hold; once its hold ran out and a looper read under a later grant, one process \"resumes\" by the persisted token without asking the store and writes with its fence 1s later, another resumes through Locker.Resume", resumeTTL)
		waitReadAfter(t, e, killed, acq.Fence, loopers[0])
		resumer = e.spawn(resumerID, append(resumerArgs, "-resume-unconfirmed", "-hold", "1s")...)
		e.spawn(lateResumerID, append(resumerArgs, "-iters", "1", "-rmw")...)
	}
	if _, ok := resumer.waitEvent(60*time.Second, isKind(wire.KindWrite)); !ok {
		t.Fatalf("the resumer never wrote\n%s", resumer.stderrText())
	}
	t.Logf("the resumer wrote at %s", time.Duration(wire.Now()-t0))
	e.waitAll(3 * time.Minute)
	t.Logf("every worker done at %s", time.Duration(wire.Now()-t0))
	judgeResume(t, e, acq.Fence, killed, control)
}

// waitReadAfter waits until a looper's grant made after since, with a fence
// above fence, has read the register (the killed holder's hold ran out).
func waitReadAfter(t *testing.T, e *env, since, fence int64, w *worker) {
	t.Helper()
	if !e.waitHistory(60*time.Second, func(evs []wire.Event) bool {
		for _, ev := range evs {
			if ev.W <= 3 && ev.Kind == wire.KindRead && ev.Accepted && ev.T > since && ev.Fence > fence {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no looper read under a grant after the holder's hold ran out\n%s", w.stderrText())
	}
}

// resumeFacts are what the checkers found of the resumed leases of a run.
type resumeFacts struct {
	resumed       int // grants by a resume
	wrongFence    int // resumed grants whose fence is not the persisted one
	order         int // grants other than the original returned before a resume was asked for, with a fence not below its
	dups          int // grants other than the original with a resumed fence
	writesOther   int // writes of a resumed section under another fence
	writesRefused int // writes of a resumed section the register refused
	notHeld       int // resumes refused with ErrNotHeld
}

func resumeCheck(evs []wire.Event, persisted int64) resumeFacts {
	var f resumeFacts
	gs := grants(evs)
	ops := map[key]string{}
	for _, ev := range evs {
		switch {
		case ev.Kind == wire.KindAcquire:
			ops[key{ev.W, ev.Iter}] = ev.Op
		case ev.Kind == wire.KindFail && ev.Op == "resume" && strings.Contains(ev.Err, "not held"):
			f.notHeld++
		}
	}
	for _, r := range gs {
		if ops[key{r.W, r.Iter}] != "resume" {
			continue
		}
		f.resumed++
		if r.Fence != persisted {
			f.wrongFence++
		}
		for _, g := range gs {
			if g.W == r.W && g.Iter == r.Iter || g.W == resumeHolderID {
				continue
			}
			if g.Fence == r.Fence {
				f.dups++
			}
			if g.Acquired < r.Invoke && g.Fence >= r.Fence {
				f.order++
			}
		}
		for _, ev := range evs {
			if ev.W == r.W && ev.Iter == r.Iter && ev.Kind == wire.KindWrite {
				if ev.Fence != persisted {
					f.writesOther++
				}
				if !ev.Accepted {
					f.writesRefused++
				}
			}
		}
	}
	return f
}

// resumeValidOverlaps counts pairs of exclusive sections of different
// leases that overlapped while both were valid (validEnd; the killed
// holder's section ends at the kill). The killed holder's grant and its
// resumption (one fence) are one lease.
func resumeValidOverlaps(gs []grant, evs []wire.Event) int {
	ttl := func(g grant) time.Duration {
		if g.W <= 3 {
			return resumeLooperTTL
		}
		return resumeTTL
	}
	ends := make([]int64, len(gs))
	for i, g := range gs {
		ends[i] = validEnd(g, evs, ttl(g), 0.01)
	}
	n := 0
	for i := range gs {
		for j := i + 1; j < len(gs); j++ {
			a, b := gs[i], gs[j]
			if a.W == b.W || a.Fence == b.Fence && (a.W == resumeHolderID || b.W == resumeHolderID) {
				continue
			}
			if a.Enter < ends[j] && b.Enter < ends[i] {
				n++
			}
		}
	}
	return n
}

// clipKilled ends the sections of a killed worker at the kill: a dead
// process does nothing after it.
func clipKilled(gs []grant, w int, killed int64) []grant {
	out := append([]grant(nil), gs...)
	for i := range out {
		if out[i].W == w && out[i].Exit == math.MaxInt64 {
			out[i].Exit = killed
		}
	}
	return out
}

func judgeResume(t *testing.T, e *env, persisted, killed int64, control bool) {
	t.Helper()
	evs := e.history()
	r := e.measure()
	gs := clipKilled(grants(evs), resumeHolderID, killed)
	r.Overlaps = overlaps(gs)
	// The resumed grant repeats the original's fence by design: the fence
	// checkers run over the other grants; resumeCheck judges the resumed.
	var others []grant
	resumedOp := map[key]bool{}
	for _, ev := range evs {
		if ev.Kind == wire.KindAcquire && ev.Op == "resume" {
			resumedOp[key{ev.W, ev.Iter}] = true
		}
	}
	for _, g := range gs {
		if !resumedOp[key{g.W, g.Iter}] {
			others = append(others, g)
		}
	}
	r.FenceDups, r.FenceOrder = fenceViolations(others)
	f := resumeCheck(evs, persisted)
	valid := resumeValidOverlaps(gs, evs)
	r.Promise = "none promised"
	r.Extra = fmt.Sprintf("resumed grants %d (fence = persisted %d: %v); resumed fence repeated by others %d, not above an earlier grant %d; resumed writes refused %d, under another fence %d; resumes refused ErrNotHeld %d; overlaps of valid leases %d",
		f.resumed, persisted, f.wrongFence == 0, f.dups, f.order, f.writesRefused, f.writesOther, f.notHeld, valid)
	if f.resumed != 1 {
		t.Errorf("resumed grants = %d, want 1", f.resumed)
	}
	if !control {
		requireSafe(t, r)
		if r.Lost != 0 {
			t.Errorf("lost updates = %d, want 0", r.Lost)
		}
		if f.wrongFence != 0 || f.dups != 0 || f.order != 0 {
			t.Errorf("resumed lease: fence not the persisted one %d, repeated by another grant %d, not above an earlier grant %d; want 0", f.wrongFence, f.dups, f.order)
		}
		if f.writesOther != 0 || f.writesRefused != 0 {
			t.Errorf("resumed section's writes: %d under another fence, %d refused; want 0", f.writesOther, f.writesRefused)
		}
		if valid != 0 {
			t.Errorf("overlaps of valid leases = %d, want 0", valid)
		}
	} else {
		requireDetected(t, "resumed fence not above a grant made before the resume (resume without confirming on the store)", f.order)
		requireDetected(t, "the unconfirmed resume's stale writes refused by the register", r.StaleRejected)
		if r.StaleAccepted != 0 {
			t.Errorf("stale writes accepted = %d, want 0 (the register is fenced)", r.StaleAccepted)
		}
		if f.notHeld != 1 {
			t.Errorf("Locker.Resume after the hold ran out: ErrNotHeld %d times, want 1", f.notHeld)
		}
		r.Promise = "not promised"
		requireLinearizable(t, r.Register)
		if r.FenceDups != 0 || r.FenceOrder != 0 {
			t.Errorf("fence violations of the other grants: %d repeated, %d out of order; want 0", r.FenceDups, r.FenceOrder)
		}
	}
	e.record(r)
}

// minHold is T35's interval: the min hold of every job.
const minHold = 3 * time.Second

// testMinHoldRestart: three job workers (TryLock every 50 ms, one fenced
// write, release at once; WithMinHold(3s), TTL 3s: a job whose release the kill cut off keeps the name as long); after the second job's
// release, the node is kill -9'd and restarted while the min hold keeps
// the name.
func testMinHoldRestart(t *testing.T, srv *testredis.Server, aof bool) {
	e := newEnvOn(t, true, srv)
	k := uniqueKey(t)
	runFor := 16 * time.Second
	if long() {
		runFor = 60 * time.Second
	}
	var ws []*worker
	for i := range 3 {
		ws = append(ws, e.spawn(i+1, "-key", k, "-ttl", minHold.String(), "-min-hold", minHold.String(), "-op-timeout", "300ms",
			"-iters", "1000000", "-duration", runFor.String(), "-gap", "50ms"))
	}
	var rel wire.Event
	if !e.waitHistory(60*time.Second, func(evs []wire.Event) bool {
		n := 0
		for _, ev := range evs {
			if ev.Kind == wire.KindRelease && ev.Err == "" {
				n++
				if ev.T > rel.T {
					rel = ev
				}
			}
		}
		return n >= 2
	}) {
		t.Fatalf("no second job released\n%s", ws[0].stderrText())
	}
	// The kept name's value and PTTL: after the restart the same value
	// (not a new grant's) must be there with what is left of the PTTL.
	valBefore, pttlBefore := mustDo(t, srv, "GET", "lock:"+k), mustDo(t, srv, "PTTL", "lock:"+k)
	killed := wire.Now()
	srv.Kill()
	srv.Restart(t)
	restarted := wire.Now()
	valAfter, pttlAfter := mustDo(t, srv, "GET", "lock:"+k), mustDo(t, srv, "PTTL", "lock:"+k)
	mode := "without persistence"
	if aof {
		mode = "from AOF always"
	}
	e.fault("3 workers fire a job (TryLock every 50ms, one fenced write, release at once) with WithMinHold(%s); kill -9 the node %s after the latest job's early release and restart it %s",
		minHold, time.Duration(killed-rel.T).Round(time.Millisecond), mode)
	e.waitAll(3 * time.Minute)
	evs := e.history()
	r := e.measure()
	gs := grants(evs)
	early, minGap := minHoldViolations(gs)
	rs := registerStats(e.reg)
	kept := valBefore != "" && valAfter == valBefore
	before, after := fencesAround(evs, killed)
	r.Extra = fmt.Sprintf("jobs %d, register writes accepted %d; job starts within one interval %d (shortest grant-to-next %s); kept name's value back after the restart: %v, its PTTL before the kill %s ms, after %s ms (down %s); max fence before the kill %d, min after %d",
		len(gs), rs.accepted, early, time.Duration(minGap).Round(time.Millisecond), kept, pttlBefore, pttlAfter,
		time.Duration(restarted-killed).Round(time.Millisecond), before, after)
	requireSafe(t, r)
	if rs.accepted != len(gs) {
		t.Errorf("register writes accepted %d, want one per job (%d)", rs.accepted, len(gs))
	}
	if len(gs) < 3 {
		t.Errorf("jobs = %d, want >= 3: the run did not go on past the restart", len(gs))
	}
	if aof {
		r.Promise = "none promised"
		if !kept {
			t.Fatalf("the kept name did not come back from AOF always (value %q before the kill, %q after the restart, PTTL %s)", valBefore, valAfter, pttlAfter)
		}
		if early != 0 {
			t.Errorf("job starts within one interval = %d, want 0", early)
		}
	} else {
		r.Promise = "not promised"
		if kept {
			t.Fatalf("the kept name came back after a restart without persistence (value %q)", valAfter)
		}
		requireDetected(t, "job starts within one interval after a restart that forgot the min hold", early)
	}
	e.record(r)
}

// minHoldViolations counts consecutive job grants (by grant time) where
// the later returned less than minHold after the earlier was asked for:
// the store kept the name until the earlier's grant + minHold, so a later
// grant returns no sooner, and the earlier's grant was no sooner than its
// ask. The store counts in milliseconds; 1 ms is its precision, allowed.
func minHoldViolations(gs []grant) (n int, shortest int64) {
	shortest = math.MaxInt64
	for i := 1; i < len(gs); i++ {
		d := gs[i].Acquired - gs[i-1].Invoke
		shortest = min(shortest, d)
		if d < int64(minHold-time.Millisecond) {
			n++
		}
	}
	return n, shortest
}
