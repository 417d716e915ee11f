package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// The scenarios of this file restart a Redlock node from an RDB snapshot
// (issue 36, its Redlock row), in Kleppmann's split of T6/T7 (redlock_test.go):
// worker 1 reaches nodes A, B, C only, worker 2 C, D, E only, and a third
// worker first takes the lock 20 times on all five, so that the nodes' fence
// keys exist (issued last + 1 rather than a fresh clock floor). Node C's
// snapshot (SAVE) is taken before worker 1's grant, or after it; C is
// killed with kill -9 while worker 1 holds, and restarted from it:
//
//   - T30a: at once, from a snapshot without the grant: worker 2 gets C, D,
//     E while worker 1's lease is valid. Redlock does not promise exclusion
//     then (its delayed-restart rule is broken): the overlap is counted and
//     shown. The fence still rises (the floor store/redlock proposes on
//     every acquire, and each node's clock floor), so worker 1's stale
//     write, made after worker 2 read, is refused.
//   - T30b: after the TTL (the delayed-restart rule), from the same kind of
//     snapshot: worker 1's lease ran out first, so no two valid leases
//     overlap (promised), and fences rise.
//   - T30c: at once, from a snapshot taken after the grant: C comes back
//     holding worker 1's key, worker 2 gets no majority until worker 1
//     releases (promised).
//   - T30d, T30e: controls of T30a: with 636d7c8's clock_lib the nodes
//     continue their stale fence keys and repeat worker 1's fence; with an
//     unfenced register worker 1's stale write lands.
//
// The five nodes start once for the group; each run takes a lock name of
// its own.

func TestFaultsRedlockRestart(t *testing.T) {
	var nodes []*testredis.Server
	for range 5 {
		nodes = append(nodes, testredis.Start(t))
	}
	repeat(t, "T30a_rdb_restart_before_ttl", func(t *testing.T) { testRedlockSnapshot(t, nodes, snapRun{fenced: true}) })
	repeat(t, "T30b_rdb_restart_after_ttl", func(t *testing.T) { testRedlockSnapshot(t, nodes, snapRun{fenced: true, after: true}) })
	repeat(t, "T30c_rdb_with_grant_restart_before_ttl", func(t *testing.T) {
		testRedlockSnapshot(t, nodes, snapRun{fenced: true, withGrant: true})
	})
	repeat(t, "T30d_rdb_restart_before_ttl_no_floor_control", func(t *testing.T) {
		testRedlockSnapshot(t, nodes, snapRun{fenced: true, clockLib: oldClockLib(t)})
	})
	repeat(t, "T30e_rdb_restart_before_ttl_unfenced_control", func(t *testing.T) { testRedlockSnapshot(t, nodes, snapRun{}) })
}

// snapRun is one T30 scenario.
type snapRun struct {
	fenced    bool
	after     bool   // C stays down past worker 1's TTL (else restarts at once)
	withGrant bool   // C's snapshot is taken after worker 1's grant
	clockLib  string // 636d7c8's clock_lib for every worker (control)
}

// forgets reports whether C comes back without worker 1's grant while
// worker 1's lease is valid: then Redlock promises no exclusion.
func (s snapRun) forgets() bool { return !s.withGrant && !s.after }

func (s snapRun) describe() string {
	d := "split A,B,C / C,D,E after 20 grants on all five; SAVE on C before worker 1's grant; kill -9 C while worker 1 holds; restart C from the snapshot at once"
	switch {
	case s.withGrant:
		d = "split A,B,C / C,D,E after 20 grants on all five; SAVE on C after worker 1's grant; kill -9 C while worker 1 holds; restart C from the snapshot at once"
	case s.after:
		d = "split A,B,C / C,D,E after 20 grants on all five; SAVE on C before worker 1's grant (TTL 1s); kill -9 C; restart C from the snapshot once worker 1's lease ran out and 1.2 TTL passed"
	}
	if s.clockLib != "" {
		d += "; workers run 636d7c8's clock_lib (no clock floor while the fence key lives)"
	}
	if !s.fenced {
		d += "; unfenced register"
	}
	return d
}

// testRedlockSnapshot runs one T30 scenario on the five nodes.
func testRedlockSnapshot(t *testing.T, nodes []*testredis.Server, s snapRun) {
	e := newEnvOn(t, s.fenced, nodes...)
	key := uniqueKey(t)
	common := []string{"-key", key}
	if s.clockLib != "" {
		common = append(common, "-clock-lib", s.clockLib)
	}
	c := nodes[2]
	warm := e.spawn(3, append([]string{"-ttl", "5s", "-wait", "5s", "-iters", "20", "-rmw"}, common...)...)
	warm.wait(time.Minute)
	if !s.withGrant {
		mustDo(t, c, "SAVE")
	}
	a := e.prepare(1)
	only(a, 0, 1, 2)
	b := e.prepare(2)
	only(b, 2, 3, 4)
	if s.after {
		// Careful, TTL 1s, held 3s: the lease runs out in the section,
		// and worker 1 leaves it without writing.
		a.start(append([]string{"-ttl", "1s", "-careful", "-iters", "1", "-rmw", "-hold", "3s"}, common...)...)
	} else {
		a.start(append([]string{"-ttl", "5s", "-iters", "1", "-rmw", "-stop-iter", "0", "-stop-at", "write"}, common...)...)
	}
	if _, ok := a.waitEvent(30*time.Second, isKind(wire.KindRead)); !ok {
		t.Fatalf("worker 1 never read under the lock\n%s", a.stderrText())
	}
	if !s.after {
		a.waitStopped(30 * time.Second)
	}
	token := mustDo(t, nodes[0], "GET", "lock:"+key)
	if s.withGrant {
		mustDo(t, c, "SAVE")
	}
	killed := wire.Now()
	c.Kill()
	if s.after {
		if _, ok := a.waitEvent(30*time.Second, isKind(wire.KindLost)); !ok {
			t.Fatalf("worker 1's lease (TTL 1s) was never lost\n%s", a.stderrText())
		}
		// Redlock's delayed-restart rule: down for longer than the TTL.
		// (This wait is the fault itself, the node's downtime.)
		time.Sleep(1200*time.Millisecond - time.Duration(wire.Now()-killed))
	}
	c.Restart(t)
	e.fault("%s", s.describe())
	if mustDo(t, c, "EXISTS", "{lock:"+key+"}:fence") != "1" {
		t.Fatalf("C came back without the name's fence key: not a restore from the snapshot\n%s", c.LogTail())
	}
	if held := mustDo(t, c, "GET", "lock:"+key) == token; held != s.withGrant {
		t.Fatalf("after the restart C holds worker 1's key = %v, want %v", held, s.withGrant)
	}
	s.finishSplit(t, e, a, common, killed)
}

// finishSplit starts worker 2 on C, D, E, lets worker 1 go on at the
// right point, and checks the run.
func (s snapRun) finishSplit(t *testing.T, e *env, a *worker, common []string, killed int64) {
	t.Helper()
	b := e.spawn(2, append([]string{"-ttl", "5s", "-wait", "15s", "-iters", "1", "-rmw"}, common...)...)
	switch {
	case s.forgets():
		// Worker 1 writes once worker 2 has read: the stale write.
		if _, ok := b.waitEvent(30*time.Second, isKind(wire.KindRead)); !ok {
			t.Fatalf("worker 2 was not granted the lock after C forgot it\n%s", b.stderrText())
		}
		a.resume()
	case s.withGrant:
		// Worker 1 still holds on A, B, C; it resumes once worker 2 asks.
		if _, ok := b.waitEvent(30*time.Second, isKind(wire.KindInvoke)); !ok {
			t.Fatalf("worker 2 never tried\n%s", b.stderrText())
		}
		a.resume()
	}
	e.waitAll(time.Minute)
	evs := e.history()
	r := e.measure()
	aTTL := 5 * time.Second
	if s.after {
		aTTL = time.Second
	}
	valid := splitValidOverlaps(evs, aTTL)
	before, after := fencesAround(evs, killed)
	bGrants := len(grants(b.snapshot()))
	r.Extra = fmt.Sprintf("overlaps of valid leases %d; worker 2 granted %d; max fence before the kill %d, min after %d (%+d)",
		valid, bGrants, before, after, after-before)
	r.Promise = "none promised"
	if s.forgets() {
		r.Promise = "not promised"
	}
	if bGrants != 1 {
		t.Errorf("worker 2 granted %d times, want 1", bGrants)
	}
	switch {
	case s.clockLib != "":
		requireDetected(t, "fence repeats (636d7c8's clock_lib)", r.FenceDups)
	case !s.fenced:
		requireDetected(t, "stale writes accepted (unfenced register)", r.StaleAccepted)
	default:
		requireSafe(t, r)
		if s.forgets() && r.StaleRejected != 1 {
			t.Errorf("stale writes rejected = %d, want 1: worker 1 wrote after worker 2 read", r.StaleRejected)
		}
	}
	if !s.forgets() && valid != 0 {
		t.Errorf("overlaps of valid leases = %d, want 0: Redlock keeps exclusion here", valid)
	}
	e.record(r)
}

// splitValidOverlaps counts the overlaps of valid leases of a T30 run:
// worker 1's TTL is aTTL, the others' 5s; drift factor 0.01 (the
// library's default).
func splitValidOverlaps(evs []wire.Event, aTTL time.Duration) int {
	gs := grants(evs)
	ttl := func(g grant) time.Duration {
		if g.W == 1 {
			return aTTL
		}
		return 5 * time.Second
	}
	n := 0
	for i := range gs {
		for j := i + 1; j < len(gs); j++ {
			x, y := gs[i], gs[j]
			if x.W != y.W && x.Enter < validEnd(y, evs, ttl(y), 0.01) && y.Enter < validEnd(x, evs, ttl(x), 0.01) {
				n++
			}
		}
	}
	return n
}
