package faults

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// The scenarios of this file make a Redis Cluster fail the way production
// clusters do (issue 36, its Redis Cluster row), while workers on
// store/valkey's cluster client (the worker's -store cluster) take, hold
// and release a lock and read-modify-write the fenced register, in the
// shape of T26/T27 (startRun: three looping workers and a holder stopped
// before its write):
//
//   - T29a-c: the master of the lock's slot is killed while its replica
//     lags (its link cut after WAIT 1), and the replica takes over
//     (CLUSTER FAILOVER TAKEOVER). The cluster forgets the holder's grant:
//     overlaps are counted and shown (no exclusion promised), fences must
//     rise (the clock floor on every grant), so the holder's stale write is
//     refused. Controls: 636d7c8's clock_lib must repeat fences; an
//     unfenced register must take the stale write.
//   - T29d: a coordinated CLUSTER FAILOVER (the replica catches up first):
//     the grant survives, and no two valid leases may overlap.
//   - T29e: the lock's slot moves to another master (SETSLOT IMPORTING /
//     MIGRATING, MIGRATE key by key, the lock key first, then SETSLOT
//     NODE) while the holder holds, and moves back while the workers loop.
//     The keys move with their TTLs: no fence lost or repeated, no second
//     holder while the first's lease is valid.
//   - T29f: control of T29e: the slot handed over without its keys (as a
//     reshard that lost them would) must let a second holder in while the
//     first's lease is valid, and the unfenced register take the stale
//     write.
//
// One cluster (3 masters, a replica each) serves the group; roles move
// from run to run, so each run asks the cluster who serves its slot.

func TestFaultsCluster(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	for _, m := range c.Nodes() {
		c.AddReplica(t, m)
	}
	repeat(t, "T29a_failover_lagging_replica", func(t *testing.T) { testClusterFailover(t, c, true, "") })
	repeat(t, "T29b_failover_lagging_replica_no_floor_control", func(t *testing.T) { testClusterFailover(t, c, true, oldClockLib(t)) })
	repeat(t, "T29c_failover_lagging_replica_unfenced_control", func(t *testing.T) { testClusterFailover(t, c, false, "") })
	repeat(t, "T29d_coordinated_failover", func(t *testing.T) { testClusterCoordinated(t, c) })
	repeat(t, "T29e_slot_move_while_held", func(t *testing.T) { testSlotMove(t, c) })
	repeat(t, "T29f_slot_moved_without_keys_control", func(t *testing.T) { testSlotDropped(t, c) })
}

// startClusterRun is startRun with 60 grants per looper (150 long): a
// cluster client takes longer to start, and the holder must find the
// loopers still at work.
func startClusterRun(t *testing.T, e *env, clockLib string, mark func()) *storeRun {
	t.Helper()
	iters := 60
	if long() {
		iters = 150
	}
	return startRunIters(t, e, clockLib, iters, mark)
}

// clusterEnv is a scenario's env on cluster c: the workers' seed links go
// to its masters (valkey-go then talks to every node directly).
func clusterEnv(t *testing.T, c *testredis.Cluster, fenced bool) *env {
	t.Helper()
	var seeds []*testredis.Server
	for _, s := range c.Servers() {
		if role, err := s.DoTimeout(time.Second, "ROLE"); err == nil && strings.HasPrefix(role, "master") {
			seeds = append(seeds, s)
		}
	}
	e := newEnvOn(t, fenced, seeds...)
	e.store = "cluster"
	return e
}

// slotOf returns the lock's slot and the master that serves it with one of
// its replicas, whose link to it is up.
func slotOf(t *testing.T, c *testredis.Cluster, name string) (slot int, master, replica *testredis.Server) {
	t.Helper()
	slot = c.Slot(t, "lock:"+name)
	// After an earlier run's failover the node asked may not yet see the
	// old master back as the new one's replica: ask until one is seen.
	var reps []*testredis.Server
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if master, reps = c.Owner(t, slot); len(reps) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %d's master %s has no replica after a minute", slot, master.Addr())
		}
	}
	waitInfo(t, reps[0], "replication", "master_link_status", "up")
	return slot, master, reps[0]
}

// T29a-c: the lagging replica takes over from its killed master.
func testClusterFailover(t *testing.T, c *testredis.Cluster, fenced bool, clockLib string) {
	key := uniqueKey(t)
	_, master, rep := slotOf(t, c, key)
	e := clusterEnv(t, c, fenced)
	failedOver := false
	t.Cleanup(func() {
		if failedOver {
			// The old master comes back empty and, outvoted by the
			// newer epoch, as the new master's replica.
			master.Restart(t)
			waitInfo(t, master, "replication", "master_link_status", "up")
			c.Wait(t)
			return
		}
		master.Do("ACL", "SETUSER", "default", "+psync", "+sync")
	})
	run := startClusterRun(t, e, clockLib, func() {
		if n := mustDo(t, master, "WAIT", "1", "5000"); n != "1" {
			t.Fatalf("WAIT 1 = %s, want 1", n)
		}
		mustDo(t, master, "ACL", "SETUSER", "default", "-psync", "-sync")
		mustDo(t, master, "CLIENT", "KILL", "TYPE", "replica")
		waitInfo(t, master, "replication", "connected_slaves", "0")
	})
	token := mustDo(t, master, "GET", "lock:"+run.key)
	killed := wire.Now()
	master.Kill()
	mustDo(t, rep, "CLUSTER", "FAILOVER", "TAKEOVER")
	failedOver = true
	waitInfo(t, rep, "replication", "role", "master")
	promoted := wire.Now()
	desc := "cut the replica's link (ACL -psync -sync, CLIENT KILL TYPE replica) after WAIT 1; a holder takes the lock and stops before its write; kill -9 the slot's master, CLUSTER FAILOVER TAKEOVER on its replica; the cluster clients follow by themselves"
	if clockLib != "" {
		desc += "; workers run 636d7c8's clock_lib (no clock floor while the fence key lives)"
	}
	e.fault("%s", desc)
	if mustDo(t, rep, "GET", "lock:"+run.key) == token {
		t.Fatal("the promoted replica has the holder's grant: it did not lag")
	}
	if mustDo(t, rep, "EXISTS", "{lock:"+run.key+"}:fence") != "1" {
		t.Fatal("the promoted replica has no fence key: not a stale failover")
	}
	run.resumeAfterNewHolderRead(t, promoted)
	e.waitAll(3 * time.Minute)
	r, _ := run.finish(t, killed, true, false, "")
	e.record(r)
}

// finish checks and records a T29 run: forgot and promised as for judge;
// the fences before and after at and the overlaps of valid leases are
// shown, with note.
func (run *storeRun) finish(t *testing.T, at int64, forgot, promised bool, note string) (r result, valid int) {
	t.Helper()
	evs := run.e.history()
	r = run.e.measure()
	r.Promise = "not promised"
	if promised {
		r.Promise = "none promised"
	}
	valid = validOverlaps(evs)
	before, after := fencesAround(evs, at)
	r.Extra = fmt.Sprintf("overlaps of valid leases %d; max fence before the fault %d, min after %d (%+d)%s", valid, before, after, after-before, note)
	run.judge(t, &r, forgot, promised, valid)
	return r, valid
}

// T29d: a coordinated failover (CLUSTER FAILOVER on the replica: the
// master stops writes until the replica has caught up) while the holder
// holds. The grant survives; the holder resumes at once, still holding.
func testClusterCoordinated(t *testing.T, c *testredis.Cluster) {
	key := uniqueKey(t)
	_, master, rep := slotOf(t, c, key)
	e := clusterEnv(t, c, true)
	run := startClusterRun(t, e, "", func() {})
	token := mustDo(t, master, "GET", "lock:"+run.key)
	at := wire.Now()
	coordinatedFailover(t, rep)
	e.fault("a holder takes the lock and stops before its write; CLUSTER FAILOVER (coordinated) on the slot's replica; the cluster clients follow by themselves")
	if got := mustDo(t, rep, "GET", "lock:"+run.key); got != token {
		t.Fatalf("the promoted replica's lock key = %q, want the holder's token: a coordinated failover lost the grant", got)
	}
	run.holder.resume()
	e.waitAll(3 * time.Minute)
	r, _ := run.finish(t, at, false, true, "; the holder's grant kept")
	waitInfo(t, master, "replication", "master_link_status", "up")
	e.record(r)
}

// tryAgains sums the TRYAGAIN error replies the nodes have sent (INFO
// errorstats): the replies to scripts that met a slot half moved.
func tryAgains(nodes ...*testredis.Server) int {
	n := 0
	for _, s := range nodes {
		info, err := s.DoTimeout(time.Second, "INFO", "errorstats")
		if err != nil {
			continue
		}
		v := infoField(info, "errorstat_TRYAGAIN")
		if c, ok := strings.CutPrefix(v, "count="); ok {
			k, _ := strconv.Atoi(c)
			n += k
		}
	}
	return n
}

// otherMaster returns a master of c other than m.
func otherMaster(t *testing.T, c *testredis.Cluster, m *testredis.Server) *testredis.Server {
	t.Helper()
	for _, s := range c.Servers() {
		if role, err := s.DoTimeout(time.Second, "ROLE"); s != m && err == nil && strings.HasPrefix(role, "master") {
			return s
		}
	}
	t.Fatal("the cluster has no other master")
	return nil
}

// moveSlot moves slot from src to dst key by key, the lock key first,
// and waits (up to 10 s) for a script of a worker to meet the slot half
// moved (a TRYAGAIN reply) before it moves the rest; it returns how many
// TRYAGAIN replies the two nodes sent meanwhile.
func moveSlot(t *testing.T, c *testredis.Cluster, slot int, src, dst *testredis.Server, name string) int {
	t.Helper()
	before := tryAgains(src, dst)
	m := c.BeginMigration(t, slot, src, dst)
	m.Move(t, "lock:"+name)
	for deadline := time.Now().Add(10 * time.Second); tryAgains(src, dst) == before && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	m.Move(t, "{lock:"+name+"}:fence")
	m.Finish(t)
	c.Wait(t)
	return tryAgains(src, dst) - before
}

// T29e: the lock's slot moves while the holder holds: its grant must move
// with its TTL, so that no one else gets the lock while its lease is
// valid; the holder then resumes at once. Once the workers hold again the
// slot moves back, while they loop.
func testSlotMove(t *testing.T, c *testredis.Cluster) {
	key := uniqueKey(t)
	slot, src, _ := slotOf(t, c, key)
	dst := otherMaster(t, c, src)
	e := clusterEnv(t, c, true)
	run := startClusterRun(t, e, "", func() {})
	token := mustDo(t, src, "GET", "lock:"+run.key)
	at := wire.Now()
	tries := moveSlot(t, c, slot, src, dst, run.key)
	if got := mustDo(t, dst, "GET", "lock:"+run.key); got != token {
		t.Fatalf("after the move the lock key on %s = %q, want the holder's token", dst.Addr(), got)
	}
	pttl, _ := strconv.Atoi(mustDo(t, dst, "PTTL", "lock:"+run.key))
	if pttl <= 0 || pttl > int(holderTTL/time.Millisecond) {
		t.Fatalf("after the move the lock key's PTTL = %d ms, want in (0, %d]", pttl, holderTTL/time.Millisecond)
	}
	resumed := run.holder.resume()
	w1 := run.loopers[0]
	if _, ok := w1.waitEvent(60*time.Second, func(ev wire.Event) bool { return ev.Kind == wire.KindAcquire && ev.T > resumed }); !ok {
		t.Fatalf("worker 1 got no grant after the move\n%s", w1.stderrText())
	}
	back := moveSlot(t, c, slot, dst, src, run.key)
	e.fault("a holder takes the lock and stops before its write; its slot moves to another master (SETSLOT IMPORTING/MIGRATING, MIGRATE the lock key, then the fence key, then the rest, SETSLOT NODE); the holder resumes; the slot moves back the same way while the workers loop")
	e.waitAll(3 * time.Minute)
	r, _ := run.finish(t, at, false, true, fmt.Sprintf("; the holder's key moved with PTTL %d ms; TRYAGAIN replies while half moved %d, moving back %d", pttl, tries, back))
	e.record(r)
}

// T29f, control of T29e: the slot is handed to another master without its
// keys (deleted on the source, then SETSLOT NODE), as a reshard that lost
// them would: a second holder must get in while the first's lease is
// valid (the checker catches it), and the unfenced register takes the
// holder's stale write.
func testSlotDropped(t *testing.T, c *testredis.Cluster) {
	key := uniqueKey(t)
	slot, src, _ := slotOf(t, c, key)
	dst := otherMaster(t, c, src)
	e := clusterEnv(t, c, false)
	run := startClusterRun(t, e, "", func() {})
	at := wire.Now()
	m := c.BeginMigration(t, slot, src, dst)
	if keys := mustDo(t, src, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(slot), "1000"); keys != "" {
		mustDo(t, src, append([]string{"DEL"}, strings.Split(keys, "\n")...)...)
	}
	m.Finish(t)
	c.Wait(t)
	moved := wire.Now()
	e.fault("a holder takes the lock and stops before its write; its slot is handed to another master without its keys (DEL on the source, SETSLOT NODE); unfenced register")
	run.resumeAfterNewHolderRead(t, moved)
	e.waitAll(3 * time.Minute)
	r, valid := run.finish(t, at, true, false, "")
	requireDetected(t, "overlaps of valid leases (slot moved without its keys)", valid)
	e.record(r)
}

// coordinatedFailover makes rep its master's master by CLUSTER FAILOVER.
// The master pauses its clients until rep has caught up, and the two give
// up after 5 s (Redis's manual failover timeout), which a loaded machine
// can reach: the failover is asked again then, three times at most.
func coordinatedFailover(t *testing.T, rep *testredis.Server) {
	t.Helper()
	for range 3 {
		mustDo(t, rep, "CLUSTER", "FAILOVER")
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if info, err := rep.Do("INFO", "replication"); err == nil && infoField(info, "role") == "master" {
				return
			}
		}
	}
	waitInfo(t, rep, "replication", "role", "master")
}
