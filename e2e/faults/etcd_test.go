package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

// The etcd scenarios (issue 36, its etcd row): a three-member cluster of
// real etcd processes (etcdCluster), started once for the group, under the
// faults production clusters meet, while workers take, hold and release a
// lock and read-modify-write the fenced register (the shape of
// consensus_test.go: a holder stopped before its write stays stopped past
// its lease's TTL through the fault).
//
//	T31a/b  the leader killed (kill -9); a new one elected; the killed
//	        member restarted from its data dir
//	T31c/d  the leader partitioned from the two others: the holder and a
//	        worker use only it (minority side) and must not be granted; the
//	        loopers use the two others (majority side) and go on
//	T31e/f  the member the holder and one looper use, a follower, killed
//	        and restarted from its data dir
//
// b, d and f are the negative controls: the same fault with an unfenced
// register, which must take the holder's stale write.

// etcdHolderTTL is the holder's TTL: its etcd lease's (whole seconds).
const etcdHolderTTL = 2 * time.Second

// consScenario is one fault of a consensus store's group, run fenced and
// as its unfenced control.
type consScenario[C any] struct {
	id, name string
	fn       func(*testing.T, C, bool)
}

// runConsGroup runs each scenario fenced (T<n><id>) and then as its
// unfenced negative control (the next letter).
func runConsGroup[C any](t *testing.T, prefix string, c C, ss []consScenario[C]) {
	for _, s := range ss {
		repeat(t, prefix+s.id+"_"+s.name, func(t *testing.T) { s.fn(t, c, true) })
		control := string(rune(s.id[0] + 1))
		repeat(t, prefix+control+"_"+s.name+"_unfenced_control", func(t *testing.T) { s.fn(t, c, false) })
	}
}

func TestFaultsEtcd(t *testing.T) {
	c := startEtcdCluster(t)
	runConsGroup(t, "T31", c, []consScenario[*etcdCluster]{
		{"a", "leader_kill", testEtcdLeaderKill},
		{"c", "leader_partitioned", testEtcdPartition},
		{"e", "member_restart", testEtcdMemberRestart},
	})
}

// T31a/b: every worker uses every member; the leader is killed while the
// holder holds. The new leader must keep the holder's grant until its lease
// runs out (no looper granted before: no valid overlap), then end it.
func testEtcdLeaderKill(t *testing.T, c *etcdCluster, fenced bool) {
	e := newConsEnv(t, fenced, "etcd")
	all := consWorker{addrs: endpoints(c.members...)}
	run := startConsRun(t, e, []consWorker{all, all, all}, all, etcdHolderTTL)
	l := c.leader(t)
	killed := wire.Now()
	l.kill()
	t.Cleanup(func() { l.ensureRunning(t) })
	nl := c.leader(t, l.i)
	elected := time.Duration(wire.Now() - killed)
	e.fault("kill -9 the leader while a holder holds (stopped before its write, kept stopped past its %v lease); a new leader elected; the killed member restarted from its data dir after the holder's write", etcdHolderTTL)
	run.resumeAfterNewHolderRead(t, killed)
	l.restart(t)
	e.waitAll(3 * time.Minute)
	run.judge(t, fmt.Sprintf("leader m%d killed, m%d elected in %v", l.i, nl.i, elected.Round(time.Millisecond)))
}

// consMinorityID is the worker connected to the partitioned member alone.
const consMinorityID = 5

// T31c/d: the leader is cut off from the two others (its peer links reset
// both ways) while the holder, connected to it alone, holds. The majority
// elects a leader, ends the holder's lease when it runs out and grants the
// loopers; a fifth worker connected to the old leader alone asks for a
// lock of its own all the while and must not be granted until the
// partition heals.
func testEtcdPartition(t *testing.T, c *etcdCluster, fenced bool) {
	e := newConsEnv(t, fenced, "etcd")
	l := c.leader(t)
	minority := consWorker{addrs: endpoints(l)}
	majority := consWorker{addrs: endpoints(c.others(l)...)}
	run := startConsRun(t, e, []consWorker{majority, majority, majority}, minority, etcdHolderTTL)
	mw := startMinority(t, "etcd", run, minority)
	mw.cut = wire.Now()
	c.partition(t, l.i)
	t.Cleanup(func() { c.heal(t) })
	nl := c.leader(t, l.i)
	e.fault("partition the leader from the two others (peer links reset both ways) while a holder connected to it alone holds (stopped before its write, kept stopped past its %v lease); a worker connected to it alone keeps asking for a lock of its own; loopers use the two others; healed after the holder's write", etcdHolderTTL)
	report := mw.thenHeal(t, run, func() {
		c.heal(t)
		l.waitHealthy(t)
	})
	run.judge(t, fmt.Sprintf("leader m%d cut off, m%d elected; %s", l.i, nl.i, report))
}

// minoritySide is the worker connected to the partitioned member alone. It
// takes a lock of its own (nobody else asks for it) and writes a register
// of its own, so that on a member that can grant it is granted at once:
// only the partition can keep it waiting.
type minoritySide struct {
	e   *env // its own: its grants and writes are not the run's
	w   *worker
	cut int64
}

// startMinority starts the minority worker: up to 40 attempts of up to 1s
// each, through cw alone; it returns once the worker has been granted
// once (before the partition).
func startMinority(t *testing.T, storeName string, run *consRun, cw consWorker) *minoritySide {
	t.Helper()
	m := &minoritySide{e: newConsEnv(t, true, storeName)}
	m.w = m.e.spawnAt(consMinorityID, cw, "-key", run.key+"-minority", "-ttl", consLooperTTL.String(), "-autorenew", "-careful",
		"-op-timeout", "500ms", "-wait", "1s", "-iters", "40", "-duration", "2m", "-hold", "5ms", "-gap", "50ms")
	if _, ok := m.w.waitEvent(60*time.Second, isKind(wire.KindAcquire)); !ok {
		t.Fatalf("worker %d was not granted before the partition\n%s", consMinorityID, m.w.stderrText())
	}
	return m
}

// thenHeal resumes the run's holder once the majority has granted a looper
// who read, waits until the minority worker has failed an attempt during
// the partition, heals, waits for every worker, and reports on the
// minority worker: it fails t if that worker was granted during the
// partition or never after it.
func (m *minoritySide) thenHeal(t *testing.T, run *consRun, heal func()) string {
	t.Helper()
	run.resumeAfterNewHolderRead(t, m.cut)
	if !m.e.waitHistory(30*time.Second, func(evs []wire.Event) bool { return failsBetween(evs, consMinorityID, m.cut, wire.Now()) > 0 }) {
		t.Fatalf("the minority worker made no attempt that failed during the partition\n%s", m.w.eventsText())
	}
	healed := wire.Now()
	heal()
	run.e.waitAll(3 * time.Minute)
	m.e.waitAll(3 * time.Minute)
	evs := m.e.history()
	during := grantsBetween(evs, consMinorityID, m.cut, healed)
	if len(during) != 0 {
		t.Errorf("the worker on the minority side was granted %d times during the partition (fence %d first), want 0", len(during), during[0].Fence)
	}
	after := grantsBetween(evs, consMinorityID, healed, wire.Now())
	if len(after) == 0 {
		t.Errorf("the worker on the minority side was never granted after the partition healed; its events:\n%s\n%s", m.w.eventsText(), m.w.stderrText())
	}
	return fmt.Sprintf("minority worker (a lock of its own): %d attempts failed and %d granted during the partition (%v), %d granted after",
		failsBetween(evs, consMinorityID, m.cut, healed), len(during), time.Duration(healed-m.cut).Round(time.Millisecond), len(after))
}

// T31e/f: the holder and looper 3 use one follower alone; it is killed
// and restarted from its data dir while the holder holds. The holder's
// lease runs out while it waits; looper 3, through the restarted member
// only, must see the lock as the others do (fences still rise).
func testEtcdMemberRestart(t *testing.T, c *etcdCluster, fenced bool) {
	e := newConsEnv(t, fenced, "etcd")
	l := c.leader(t)
	f := c.others(l)[0]
	alone := consWorker{addrs: endpoints(f)}
	rest := consWorker{addrs: endpoints(c.others(f)...)}
	run := startConsRun(t, e, []consWorker{rest, rest, alone}, alone, etcdHolderTTL)
	killed := wire.Now()
	f.kill()
	t.Cleanup(func() { f.ensureRunning(t) })
	f.restart(t)
	restarted := wire.Now()
	e.fault("kill -9 a follower, the only member the holder and looper 3 use, while the holder holds (stopped before its write, kept stopped past its %v lease); restarted from its data dir at once", etcdHolderTTL)
	run.resumeAfterNewHolderRead(t, killed)
	e.waitAll(3 * time.Minute)
	evs := e.history()
	after := len(grantsBetween(evs, 3, restarted, wire.Now()))
	if after == 0 {
		t.Errorf("looper 3, connected to the restarted member alone, was never granted after the restart")
	}
	run.judge(t, fmt.Sprintf("follower m%d down %v; looper 3 granted %d times through it after the restart",
		f.i, time.Duration(restarted-killed).Round(time.Millisecond), after))
}
