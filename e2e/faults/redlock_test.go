package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
)

func TestFaultsRedlock(t *testing.T) {
	repeat(t, "T5a_pause_during_acquire", testRedlockPauseAcquire)
	t.Run("T5b_replies_delayed_past_ttl", testRedlockSlowReplies)
	repeat(t, "T6_clock_jump_one_node_unfenced", func(t *testing.T) { testRedlockSplit(t, false, "jump") })
	repeat(t, "T6_clock_jump_one_node_fenced", func(t *testing.T) { testRedlockSplit(t, true, "jump") })
	repeat(t, "T7i_restart_at_once_unfenced", func(t *testing.T) { testRedlockSplit(t, false, "restart") })
	repeat(t, "T7i_restart_at_once_fenced", func(t *testing.T) { testRedlockSplit(t, true, "restart") })
	repeat(t, "T7ii_restart_after_ttl", testRedlockDelayedRestart)
	repeat(t, "T7iii_restart_with_aof", testRedlockPersistentRestart)
	t.Run("T8_minority_then_majority_down", testRedlockNodesDown)
}

// waitKeyOn polls the nodes until at least n of them hold the lock key
// (or timeout), and returns how many do.
func (e *env) waitKeyOn(n int, timeout time.Duration) int {
	landed := 0
	for deadline := time.Now().Add(timeout); landed < n && time.Now().Before(deadline); {
		landed = 0
		for _, node := range e.nodes {
			if v, err := node.Do("EXISTS", lockKey); err == nil && v == "1" {
				landed++
			}
		}
	}
	return landed
}

// only leaves worker w linked to the listed nodes: the proxies to the
// others are stopped (connections refused), as seen from w alone.
func only(w *worker, nodes ...int) {
	keep := map[int]bool{}
	for _, n := range nodes {
		keep[n] = true
	}
	for i, p := range w.links {
		if !keep[i] {
			p.Stop()
		}
	}
}

// T5a (Kleppmann's pause during acquisition): the replies to the first
// worker are slowed by 300ms; as soon as its SETs have landed on a majority
// of nodes the harness SIGSTOPs it, so the grants wait in its socket
// buffers while it is stopped for 1.5s, past its 1s TTL. Meanwhile the keys
// expire and a second worker takes the lock. On resume the first worker
// reads its "granted" replies: it must count the time it spent and report
// failure, never a grant.
func testRedlockPauseAcquire(t *testing.T) {
	e := newEnv(t, 5, true)
	a := e.prepare(1)
	a.start("-ttl", "1s", "-node-timeout", "3s", "-start-after", "300ms", "-iters", "1", "-rmw", "-hold", "50ms")
	if _, ok := a.waitEvent(10*time.Second, isKind(wire.KindStart)); !ok {
		t.Fatalf("worker 1 never started\n%s", a.stderrText())
	}
	for _, p := range a.links {
		e.toxic(p, "slow", "latency", "downstream", map[string]any{"latency": 300})
	}
	if _, ok := a.waitEvent(10*time.Second, isKind(wire.KindInvoke)); !ok {
		t.Fatalf("worker 1 never tried\n%s", a.stderrText())
	}
	landed := e.waitKeyOn(3, time.Second)
	a.pause()
	if landed < 3 {
		t.Fatalf("worker 1's SETs reached %d nodes, want a majority before the pause", landed)
	}
	e.fault("replies to worker 1 delayed 300ms; worker 1 SIGSTOPped for 1.5s once its SETs held a majority (TTL 1s)")
	b := e.spawn(2, "-ttl", "1s", "-autorenew", "-wait", "5s", "-iters", "1", "-rmw", "-hold", "500ms")
	bAcq, ok := b.waitEvent(5*time.Second, isKind(wire.KindAcquire))
	if !ok {
		t.Fatalf("worker 2 never acquired\n%s", b.stderrText())
	}
	if d := 1500*time.Millisecond - time.Duration(bAcq.T-wire.Now()); d > 0 {
		time.Sleep(d)
	}
	a.resume()
	e.waitAll(30 * time.Second)
	r := e.measure()
	// The grant whose replies waited out the pause must be refused; the
	// Locker may then ask again, and a fresh grant after worker 2 is fine.
	aGrants, bGrants := grants(a.snapshot()), grants(b.snapshot())
	for _, g := range aGrants {
		if len(bGrants) == 1 && (g.Fence <= bGrants[0].Fence || g.Enter < bGrants[0].Exit) {
			t.Errorf("worker 1 granted fence %d before worker 2 (fence %d) was done: the stale grant was taken", g.Fence, bGrants[0].Fence)
		}
	}
	r.Extra = fmt.Sprintf("paused worker's stale grant refused; it was granted afresh after resume: %v", len(aGrants) > 0)
	if r.Overlaps != 0 {
		t.Errorf("overlaps = %d, want 0 (a double grant)", r.Overlaps)
	}
	requireSafe(t, r)
	e.record(r)
}

// T5b (antirez's answer to a slow acquisition): every reply to the first
// worker arrives later than its TTL. Its SETs are applied at once, but by
// the time it counts its majority the validity is gone, so it must report
// failure (and release what it set), never a grant. A second worker starts
// just after it and gets the lock once the first one's keys are gone.
func testRedlockSlowReplies(t *testing.T) {
	e := newEnv(t, 5, true)
	a := e.prepare(1)
	a.start("-ttl", "1s", "-node-timeout", "3s", "-start-after", "300ms", "-iters", "1", "-rmw")
	if _, ok := a.waitEvent(10*time.Second, isKind(wire.KindStart)); !ok {
		t.Fatalf("worker 1 never started\n%s", a.stderrText())
	}
	for _, p := range a.links {
		e.toxic(p, "slow", "latency", "downstream", map[string]any{"latency": 1300})
	}
	e.fault("latency 1300ms on every reply to worker 1 (TTL 1s, node timeout 3s)")
	if _, ok := a.waitEvent(10*time.Second, isKind(wire.KindInvoke)); !ok {
		t.Fatalf("worker 1 never tried\n%s", a.stderrText())
	}
	if landed := e.waitKeyOn(3, 5*time.Second); landed < 3 {
		t.Fatalf("worker 1's SETs reached %d nodes, want a majority", landed)
	}
	b := e.spawn(2, "-ttl", "1s", "-wait", "8s", "-iters", "3", "-rmw", "-hold", "100ms")
	e.waitAll(30 * time.Second)
	r := e.measure()
	aGrants := len(grants(a.snapshot()))
	bGrants := len(grants(b.snapshot()))
	r.Extra = fmt.Sprintf("slow worker granted %d, other %d", aGrants, bGrants)
	if aGrants != 0 {
		t.Errorf("worker 1 was granted a lock whose replies came after its TTL (%d grants), want 0", aGrants)
	}
	if bGrants == 0 {
		t.Errorf("worker 2 was never granted the lock")
	}
	if r.Overlaps != 0 {
		t.Errorf("overlaps = %d, want 0", r.Overlaps)
	}
	requireSafe(t, r)
	e.record(r)
}

// T6 and T7(i): Kleppmann's split. Worker 1 reaches nodes A, B, C only and
// worker 2 reaches C, D, E only. Worker 1 takes the lock on A, B, C (TTL
// 5s) and reads. Then C forgets the lock: "jump" expires the key on C
// (PEXPIRE 1: the effect of C's clock jumping forward), "restart" kills C
// and restarts it at once without persistence. Worker 2 then gets C, D, E:
// a majority, while worker 1 still holds its valid lease. Both believe they
// hold the lock; this is Redlock's documented limit. Worker 1's write then
// comes after worker 2's read: the fenced register refuses it, the
// unfenced one takes it.
func testRedlockSplit(t *testing.T, fenced bool, how string) {
	e := newEnv(t, 5, fenced)
	// Twenty grants on all five nodes first, so that the split meets
	// counters that issue last + 1 rather than fresh ones on the clock
	// floor: node C's forgotten or restarted counter must still lose to the
	// fences those counters issued.
	warm := e.prepare(3)
	warm.start("-ttl", "5s", "-wait", "5s", "-iters", "20", "-rmw")
	warm.wait(time.Minute)
	a := e.prepare(1)
	only(a, 0, 1, 2)
	b := e.prepare(2)
	only(b, 2, 3, 4)
	e.fault("worker 1 reaches nodes A,B,C; worker 2 reaches C,D,E")
	a.start("-ttl", "5s", "-iters", "1", "-rmw", "-hold", "1500ms")
	if _, ok := a.waitEvent(10*time.Second, isKind(wire.KindRead)); !ok {
		t.Fatalf("worker 1 never read under the lock\n%s", a.stderrText())
	}
	switch how {
	case "jump":
		if _, err := e.nodes[2].Do("PEXPIRE", lockKey, "1"); err != nil {
			t.Fatal(err)
		}
		e.fault("lock key expired early on C (simulated clock jump: PEXPIRE 1)")
	case "restart":
		e.nodes[2].Restart(t)
		e.fault("C killed and restarted at once, no persistence")
	}
	b.start("-ttl", "5s", "-wait", "1s", "-iters", "1", "-rmw")
	bRead, ok := b.waitEvent(10*time.Second, isKind(wire.KindRead))
	e.waitAll(30 * time.Second)
	if !ok {
		t.Fatalf("worker 2 was not granted the lock after C forgot it\n%s", b.stderrText())
	}
	aWrite, _ := a.waitEvent(time.Second, isKind(wire.KindWriteCall))
	if aWrite.T < bRead.T {
		t.Fatalf("worker 1 wrote before worker 2 read: the scenario did not set up")
	}
	r := e.measure()
	r.Extra = "two holders at once: Redlock's documented limit"
	if fenced {
		requireSafe(t, r)
		if r.StaleRejected != 1 {
			t.Errorf("stale writes rejected = %d, want 1", r.StaleRejected)
		}
	} else {
		requireDetected(t, "overlaps", r.Overlaps)
		requireDetected(t, "stale writes accepted", r.StaleAccepted)
	}
	e.record(r)
}

// T7(ii): as T7(i), but C comes back only after the longest TTL has passed
// (the delayed-restart rule). Worker 1 is careful: its lease has run out,
// so it stopped before worker 2 could get C, D, E.
func testRedlockDelayedRestart(t *testing.T) {
	e := newEnv(t, 5, true)
	a := e.prepare(1)
	only(a, 0, 1, 2)
	b := e.prepare(2)
	only(b, 2, 3, 4)
	a.start("-ttl", "1s", "-careful", "-iters", "1", "-rmw", "-hold", "3s")
	if _, ok := a.waitEvent(10*time.Second, isKind(wire.KindRead)); !ok {
		t.Fatalf("worker 1 never read under the lock\n%s", a.stderrText())
	}
	e.nodes[2].Kill()
	time.Sleep(1200 * time.Millisecond)
	e.nodes[2].Restart(t)
	e.fault("split A,B,C / C,D,E; C killed, restarted after 1.2s > TTL 1s, no persistence")
	b.start("-ttl", "1s", "-wait", "5s", "-iters", "1", "-rmw")
	e.waitAll(30 * time.Second)
	r := e.measure()
	if r.Overlaps != 0 {
		t.Errorf("overlaps = %d, want 0", r.Overlaps)
	}
	if len(grants(b.snapshot())) != 1 {
		t.Errorf("worker 2 was not granted the lock")
	}
	requireSafe(t, r)
	e.record(r)
}

// T7(iii): as T7(i), but every node keeps an append-only file fsynced on
// every write: C comes back with worker 1's key, so worker 2 cannot get a
// majority until worker 1 releases.
func testRedlockPersistentRestart(t *testing.T) {
	e := newEnv(t, 5, true, testredis.WithPersistence())
	a := e.prepare(1)
	only(a, 0, 1, 2)
	b := e.prepare(2)
	only(b, 2, 3, 4)
	a.start("-ttl", "5s", "-iters", "1", "-rmw", "-hold", "1s")
	if _, ok := a.waitEvent(10*time.Second, isKind(wire.KindRead)); !ok {
		t.Fatalf("worker 1 never read under the lock\n%s", a.stderrText())
	}
	e.nodes[2].Restart(t)
	e.fault("split A,B,C / C,D,E; C killed and restarted at once with appendfsync always")
	b.start("-ttl", "5s", "-wait", "8s", "-iters", "1", "-rmw")
	e.waitAll(30 * time.Second)
	r := e.measure()
	if r.Overlaps != 0 {
		t.Errorf("overlaps = %d, want 0 (a double grant)", r.Overlaps)
	}
	if len(grants(b.snapshot())) != 1 {
		t.Errorf("worker 2 was not granted the lock after worker 1 released")
	}
	requireSafe(t, r)
	e.record(r)
}

// T8: three workers take the Redlock lock in a loop while nodes die: two
// of five (grants go on), then three of five (no grant at all, every
// attempt ends within its wait), then all come back (grants resume).
func testRedlockNodesDown(t *testing.T) {
	e := newEnv(t, 5, true)
	phase := 1500 * time.Millisecond
	for i := range 3 {
		e.spawn(i+1, "-ttl", "1s", "-wait", "500ms", "-iters", "100000", "-duration", (5 * phase).String(),
			"-rmw", "-hold", "2ms", "-gap", "5ms")
	}
	time.Sleep(phase)
	down2 := wire.Now()
	e.nodes[3].Kill()
	e.nodes[4].Kill()
	e.fault("SIGKILL nodes D, E")
	time.Sleep(phase)
	down3 := wire.Now()
	e.nodes[2].Kill()
	e.fault("SIGKILL node C (3 of 5 down)")
	time.Sleep(phase)
	up := wire.Now()
	for _, n := range e.nodes[2:] {
		n.Restart(t)
	}
	e.fault("restart C, D, E without persistence")
	e.waitAll(time.Minute)
	r := e.measure()
	var in2, in3, after int
	for _, g := range grants(e.history()) {
		switch {
		case g.Acquired > down2 && g.Acquired < down3:
			in2++
		case g.Acquired > down3+int64(100*time.Millisecond) && g.Invoke > down3 && g.Acquired < up:
			in3++
		case g.Invoke > up:
			after++
		}
	}
	var slowFails int
	evs := e.history()
	inv := map[key]int64{}
	for _, ev := range evs {
		switch ev.Kind {
		case wire.KindInvoke:
			inv[key{ev.W, ev.Iter}] = ev.T
		case wire.KindFail:
			if time.Duration(ev.T-inv[key{ev.W, ev.Iter}]) > 2*time.Second {
				slowFails++
			}
		}
	}
	r.Extra = fmt.Sprintf("grants with 2 down %d, with 3 down %d, after restart %d; acquires hanging past 2s %d", in2, in3, after, slowFails)
	if in2 == 0 {
		t.Errorf("no grant with 2 of 5 nodes down, want progress")
	}
	if in3 != 0 {
		t.Errorf("grants with 3 of 5 nodes down = %d, want 0", in3)
	}
	if after == 0 {
		t.Errorf("no grant after the nodes came back")
	}
	if slowFails != 0 {
		t.Errorf("%d acquires took over 2s to fail (wait 500ms), want 0", slowFails)
	}
	if r.Overlaps != 0 {
		t.Errorf("overlaps = %d, want 0", r.Overlaps)
	}
	requireSafe(t, r)
	e.record(r)
}
