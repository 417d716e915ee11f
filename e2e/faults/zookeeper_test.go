package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

// The ZooKeeper scenarios (issue 36, its ZooKeeper row): a three-server
// ensemble of real ZooKeeper processes (zkEnsemble), started once for the
// group, while workers take, hold and release a lock and read-modify-write
// the fenced register (the shape of consensus_test.go). The holder's session
// timeout is its TTL, 2s; it is stopped (SIGSTOP) before its write and kept
// stopped until its session has expired and a looper read under the next
// grant.
//
//	T32a/b  the leader killed (kill -9); a new one elected; the killed
//	        server restarted from its data dir
//	T32c/d  nothing but the pause: the holder's session expired by a
//	        pause longer than the session timeout
//	T32e/f  the leader partitioned from the two others: the holder and a
//	        worker use only it (minority side) and must not be granted; the
//	        loopers use the two others (majority side) and go on
//
// b, d and f are the negative controls: the same fault with an unfenced
// register, which must take the holder's stale write.

// zkHolderSession is the holder's session timeout and TTL (the store
// refuses a TTL above the session timeout).
const zkHolderSession = 2 * time.Second

// zkLooperSession is the loopers' session timeout: their sessions outlive
// a leader election.
const zkLooperSession = 6 * time.Second

func zkWorker(session time.Duration, ss ...*zkServer) consWorker {
	return consWorker{addrs: zkAddrs(ss...), opts: []string{"-opt", "session-timeout=" + session.String()}}
}

func TestFaultsZooKeeper(t *testing.T) {
	z := startZKEnsemble(t)
	runConsGroup(t, "T32", z, []consScenario[*zkEnsemble]{
		{"a", "leader_kill", testZKLeaderKill},
		{"c", "session_expired_by_pause", testZKSessionExpiry},
		{"e", "leader_partitioned", testZKPartition},
	})
}

// T32a/b: every worker uses every server; the leader is killed while the
// holder holds. Its session must live on under the new leader until it
// times out (no looper granted before), then end.
func testZKLeaderKill(t *testing.T, z *zkEnsemble, fenced bool) {
	e := newConsEnv(t, fenced, "zookeeper")
	looper := zkWorker(zkLooperSession, z.servers...)
	run := startConsRun(t, e, []consWorker{looper, looper, looper}, zkWorker(zkHolderSession, z.servers...), zkHolderSession)
	l := z.leader(t)
	killed := wire.Now()
	l.kill()
	t.Cleanup(func() { l.ensureRunning(t) })
	nl := z.leader(t, l.i)
	elected := time.Duration(wire.Now() - killed)
	e.fault("kill -9 the leader while a holder holds (stopped before its write, kept stopped past its %v session timeout); a new leader elected; the killed server restarted from its data dir after the holder's write", zkHolderSession)
	run.resumeAfterNewHolderRead(t, killed)
	l.restart(t)
	e.waitAll(3 * time.Minute)
	run.judge(t, fmt.Sprintf("leader s%d killed, s%d elected in %v", l.i, nl.i, elected.Round(time.Millisecond)))
}

// T32c/d: no server fault: the holder, connected to a follower, is stopped
// past its session timeout; the ensemble expires the session and deletes
// its node, and a looper takes the lock.
func testZKSessionExpiry(t *testing.T, z *zkEnsemble, fenced bool) {
	e := newConsEnv(t, fenced, "zookeeper")
	f := z.others(z.leader(t))[0]
	looper := zkWorker(zkLooperSession, z.servers...)
	run := startConsRun(t, e, []consWorker{looper, looper, looper}, zkWorker(zkHolderSession, f), zkHolderSession)
	stopped := wire.Now()
	e.fault("a holder connected to a follower stopped (SIGSTOP) before its write and kept stopped past its %v session timeout", zkHolderSession)
	run.resumeAfterNewHolderRead(t, stopped)
	e.waitAll(3 * time.Minute)
	run.judge(t, "")
}

// T32e/f: the leader is cut off from the two others (its quorum and
// election links reset both ways) while the holder, connected to it alone,
// holds. The majority elects a leader, expires the holder's session and
// grants the loopers; a fifth worker connected to the old leader alone
// asks for a lock of its own all the while and must not be granted until
// the partition heals.
func testZKPartition(t *testing.T, z *zkEnsemble, fenced bool) {
	e := newConsEnv(t, fenced, "zookeeper")
	l := z.leader(t)
	minority := zkWorker(zkLooperSession, l)
	majority := zkWorker(zkLooperSession, z.others(l)...)
	run := startConsRun(t, e, []consWorker{majority, majority, majority}, zkWorker(zkHolderSession, l), zkHolderSession)
	mw := startMinority(t, "zookeeper", run, minority)
	mw.cut = wire.Now()
	z.partition(t, l.i)
	t.Cleanup(func() { z.heal(t) })
	nl := z.leader(t, l.i)
	e.fault("partition the leader from the two others (quorum and election links reset both ways) while a holder connected to it alone holds (stopped before its write, kept stopped past its %v session timeout); a worker connected to it alone keeps asking for a lock of its own; loopers use the two others; healed after the holder's write", zkHolderSession)
	report := mw.thenHeal(t, run, func() {
		z.heal(t)
		l.waitServing(t)
	})
	run.judge(t, fmt.Sprintf("leader s%d cut off, s%d elected; %s", l.i, nl.i, report))
}
