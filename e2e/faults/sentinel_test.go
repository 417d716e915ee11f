package faults

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// The scenarios of this file (T28, issue 36's Sentinel row) run a primary,
// two replicas and three real Sentinels (redis-sentinel processes, quorum
// 2). The workers find the primary through the Sentinels and follow it
// themselves: store/valkey over valkey-go's Sentinel client
// (ClientOption.Sentinel) and store/goredis over go-redis's failover
// client. No scenario moves a worker by hand; a worker that did not follow
// the new primary would take no grant after the failover, which fails the
// run.
//
// A replica is made to lag by cutting its link on the primary: each node
// replicates as a user of its own (masteruser n<i>), and the primary
// revokes that user's PSYNC and SYNC and kills its connection, so the
// replica can neither resume nor resync (as T27 does to its one replica).
// Which replica Sentinel promotes is fixed by replica-priority (node i has
// 10*(i+1); the lower wins), so a scenario chooses whether the promoted
// replica is the one that lagged.
//
// Where WithWaitReplicas(1) is on and the promoted replica is the one that
// confirmed every grant, the store promises exclusion: overlaps of valid
// leases must be 0. Elsewhere the promoted replica missed the holder's
// grant; overlaps are counted and shown, and fences must still rise (the
// clock floor on every grant), so the holder's stale write is refused.
// Negative controls: an unfenced register under the same failover must
// accept the stale write, and 636d7c8's clock_lib (no clock floor while
// the fence key lives) must repeat fences.

// sentinelName is the Sentinel master name of the group.
const sentinelName = "mymaster"

// sentinelGroup is three redis-server nodes, one of them the primary, and
// three Sentinels monitoring them, shared by the scenarios of
// TestFaultsSentinel (started once). A failover changes primary; the old
// primary is restarted empty and rejoins as a replica.
type sentinelGroup struct {
	nodes     []*testredis.Server
	sentinels []*testredis.Server
	primary   int
}

func nodeUser(i int) string { return "n" + strconv.Itoa(i) }

func startSentinelGroup(t *testing.T) *sentinelGroup {
	t.Helper()
	g := &sentinelGroup{}
	var users []string
	for _, u := range []string{nodeUser(0), nodeUser(1), nodeUser(2), "sentinel"} {
		users = append(users, "--user", u, "on", "nopass", "~*", "&*", "+@all")
	}
	for i := range 3 {
		args := append(slices.Clone(users), "--replica-priority", strconv.Itoa(10*(i+1)),
			"--masteruser", nodeUser(i), "--masterauth", "x")
		g.nodes = append(g.nodes, testredis.Start(t, testredis.WithArgs(args...)))
	}
	for _, r := range g.nodes[1:] {
		mustDo(t, r, "REPLICAOF", "127.0.0.1", strconv.Itoa(g.nodes[0].Port()))
	}
	for range 3 {
		s := testredis.StartSentinel(t)
		// failover-timeout bounds a promotion and spaces two failovers
		// of one master (2x): short, so that the scenarios follow one
		// another quickly.
		s.Monitor(t, sentinelName, g.nodes[0], 2, "down-after-milliseconds", "1500", "failover-timeout", "3000",
			"auth-user", "sentinel", "auth-pass", "x")
		g.sentinels = append(g.sentinels, s)
	}
	return g
}

// ready waits until the replicas' links are up and every Sentinel knows
// the primary, the other Sentinels and both replicas, none down.
func (g *sentinelGroup) ready(t *testing.T) {
	t.Helper()
	for _, i := range g.replicas() {
		waitInfo(t, g.nodes[i], "replication", "master_link_status", "up")
	}
	testredis.WaitSentinels(t, g.sentinels, sentinelName, g.nodes[g.primary].Addr(), 2, 60*time.Second)
}

// replicas returns the replicas' indexes, the one Sentinel promotes (the
// lower replica-priority) first.
func (g *sentinelGroup) replicas() []int {
	var rs []int
	for i := range g.nodes {
		if i != g.primary {
			rs = append(rs, i)
		}
	}
	return rs
}

// cut makes replica i lag: after every write so far reached both
// replicas, the primary revokes i's PSYNC and SYNC and kills its link.
func (g *sentinelGroup) cut(t *testing.T, i int) {
	t.Helper()
	p := g.nodes[g.primary]
	if n := mustDo(t, p, "WAIT", "2", "5000"); n != "2" {
		t.Fatalf("WAIT 2 = %s, want 2", n)
	}
	mustDo(t, p, "ACL", "SETUSER", nodeUser(i), "-psync", "-sync")
	mustDo(t, p, "CLIENT", "KILL", "USER", nodeUser(i))
	waitInfo(t, p, "replication", "connected_slaves", "1")
}

// waitFailover waits until every Sentinel names a primary other than old
// and that node answers as a primary, and returns its index.
func (g *sentinelGroup) waitFailover(t *testing.T, old int) int {
	t.Helper()
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		addrs := map[string]bool{}
		for _, s := range g.sentinels {
			a, err := s.MasterAddr(sentinelName)
			if err != nil {
				last = err.Error()
				break
			}
			addrs[a] = true
		}
		if len(addrs) != 1 || addrs[g.nodes[old].Addr()] {
			last = fmt.Sprint(addrs)
			continue
		}
		for i, n := range g.nodes {
			if addrs[n.Addr()] {
				info, err := n.Do("INFO", "replication")
				if err == nil && infoField(info, "role") == "master" {
					return i
				}
				last = n.Addr() + " not yet a primary"
			}
		}
	}
	t.Fatalf("no failover from %s after 60s: %s\n%s", g.nodes[old].Addr(), last, g.sentinels[0].LogTail())
	return -1
}

// rejoin restarts the old primary empty and makes it a replica of the
// new one (what Sentinel does to it too once it answers).
func (g *sentinelGroup) rejoin(t *testing.T, old int) {
	t.Helper()
	n := g.nodes[old]
	n.Restart(t)
	mustDo(t, n, "REPLICAOF", "127.0.0.1", strconv.Itoa(g.nodes[g.primary].Port()))
	waitInfo(t, n, "replication", "master_link_status", "up")
}

// sentinelCase is one T28 kill scenario.
type sentinelCase struct {
	store string // the worker's store: "sentinel" (store/valkey) or "goredis-sentinel"
	// wait: store/valkey's WithWaitReplicas(1, 500ms)
	wait bool
	// lagPromoted: the replica Sentinel promotes is the one that lagged
	// (else the other lags, and the promoted one has every grant)
	lagPromoted bool
	fenced      bool
	noFloor     bool // the workers run 636d7c8's clock_lib
}

func TestFaultsSentinel(t *testing.T) {
	g := startSentinelGroup(t)
	kill := func(name string, c sentinelCase) {
		repeat(t, name, func(t *testing.T) { testSentinelKill(t, g, c) })
	}
	kill("T28a_sentinel_kill_lagging_promoted", sentinelCase{store: "sentinel", lagPromoted: true, fenced: true})
	kill("T28b_sentinel_kill_wait_replicas_confirmed_promoted", sentinelCase{store: "sentinel", wait: true, fenced: true})
	kill("T28d_goredis_sentinel_kill_lagging_promoted", sentinelCase{store: "goredis-sentinel", lagPromoted: true, fenced: true})
	kill("T28f_sentinel_kill_lagging_promoted_no_floor_control", sentinelCase{store: "sentinel", lagPromoted: true, fenced: true, noFloor: true})
	if long() {
		// The short profile keeps the budget of issue 36: T27b is the
		// unfenced control of a failover to a lagging replica there.
		kill("T28c_sentinel_kill_wait_replicas_lagging_promoted", sentinelCase{store: "sentinel", wait: true, lagPromoted: true, fenced: true})
		kill("T28e_sentinel_kill_lagging_promoted_unfenced_control", sentinelCase{store: "sentinel", lagPromoted: true})
	}
	part := func(name string, c partitionCase) {
		repeat(t, name, func(t *testing.T) { testSentinelPartition(t, g, c) })
	}
	part("T28g_sentinel_partition_min_replicas_off", partitionCase{})
	part("T28h_sentinel_partition_min_replicas_on", partitionCase{minReplicas: true})
	if long() {
		part("T28i_sentinel_partition_min_replicas_on_wait_replicas", partitionCase{minReplicas: true, waitAll: true})
	}
}

// testSentinelKill: three workers loop through the Sentinels; one replica
// is cut (lags); a holder takes the lock and stops before its write; the
// primary is killed with kill -9; Sentinel promotes a replica, and the
// workers follow it on their own. Where the promoted replica lagged, the
// others take the lock at once and read the register, then the holder
// writes with its old fence; where it has the grant, the holder resumes
// at once.
func testSentinelKill(t *testing.T, g *sentinelGroup, c sentinelCase) {
	g.ready(t)
	old := g.primary
	rs := g.replicas()
	promote, lagger := rs[0], rs[1]
	if c.lagPromoted {
		lagger = rs[0]
	}
	e := newEnvOn(t, c.fenced, g.sentinels...)
	e.store = c.store
	if c.wait {
		// The WAIT scenarios dial the URL form of a Sentinel client.
		e.args = []string{"-opt", "wait-replicas=1", "-opt", "wait-timeout=500ms", "-opt", "url=1"}
	}
	clockLib := ""
	if c.noFloor {
		clockLib = oldClockLib(t)
	}
	p := g.nodes[old]
	failedOver := false
	t.Cleanup(func() {
		if failedOver {
			g.rejoin(t, old)
			return
		}
		// A run that ended before its failover gives the replica its
		// link back.
		p.Do("ACL", "SETUSER", nodeUser(lagger), "+psync", "+sync")
	})
	run := startRun(t, e, clockLib, func() { g.cut(t, lagger) })
	token := mustDo(t, p, "GET", "lock:"+run.key)
	// Read on the replica to be promoted before the kill: after the
	// failover the grant may have expired there (its 5 s TTL) on a slow
	// machine, which would look like a grant it never had.
	held := mustDo(t, g.nodes[promote], "GET", "lock:"+run.key) == token
	if held == c.lagPromoted {
		t.Fatalf("the replica Sentinel will promote has the holder's grant = %v, want %v", held, !c.lagPromoted)
	}
	killed := wire.Now()
	p.Kill()
	g.primary = g.waitFailover(t, old)
	failedOver = true
	promoted := wire.Now()
	if g.primary != promote {
		t.Fatalf("Sentinel promoted %s, want %s (the lower replica-priority)", g.nodes[g.primary].Addr(), g.nodes[promote].Addr())
	}
	e.fault("%s", sentinelFaultText(c))
	if c.lagPromoted {
		run.resumeAfterNewHolderRead(t, promoted)
	} else {
		run.holder.resume()
	}
	e.waitAll(3 * time.Minute)
	evs := e.history()
	followed(t, run, evs, promoted)
	r := e.measure()
	promised := c.wait && !c.lagPromoted
	r.Promise = "not promised"
	if promised {
		r.Promise = "none promised"
	}
	valid := validOverlaps(evs)
	before, after := fencesAround(evs, killed)
	r.Extra = fmt.Sprintf("holder's grant on the promoted replica: %v; overlaps of valid leases %d; max fence before the kill %d, min after %d (%+d)",
		held, valid, before, after, after-before)
	run.judge(t, &r, c.lagPromoted, promised, valid)
	e.record(r)
}

func sentinelFaultText(c sentinelCase) string {
	s := map[string]string{
		"sentinel":         "store/valkey through valkey-go's Sentinel client",
		"goredis-sentinel": "store/goredis through go-redis's Sentinel failover client",
	}[c.store]
	if c.wait {
		s = "store/valkey through valkey.Dial(\"redis://<3 Sentinels>?master_set=mymaster\") with WithWaitReplicas(1, 500ms)"
	}
	lag := "the replica Sentinel does not prefer"
	if c.lagPromoted {
		lag = "the replica Sentinel prefers"
	}
	s += "; cut " + lag + " (ACL -psync -sync on its user, CLIENT KILL USER) after WAIT 2; a holder takes the lock and stops before its write; kill -9 the primary; 3 Sentinels (quorum 2) promote the preferred replica; workers follow on their own"
	if c.noFloor {
		s += "; workers run 636d7c8's clock_lib (no clock floor while the fence key lives)"
	}
	return s
}

// followed fails t unless every looper took a grant after the failover:
// the clients found the new primary through the Sentinels.
func followed(t *testing.T, run *storeRun, evs []wire.Event, since int64) {
	t.Helper()
	after := map[int]int{}
	for _, g := range grants(evs) {
		if g.Acquired > since {
			after[g.W]++
		}
	}
	for _, w := range run.loopers {
		if after[w.id] == 0 {
			t.Errorf("worker %d took no grant after the failover: its client did not follow the new primary\n%s", w.id, w.stderrText())
		}
	}
}

// partitionCase is one T28 partition scenario.
type partitionCase struct {
	minReplicas bool // min-replicas-to-write 1 on every node (else 0)
	waitAll     bool // store/valkey's WithWaitReplicas(2, 500ms): both replicas confirm
}

// isolate cuts the primary from its replicas and the Sentinels, or heals
// the cut: their users (n<i>, sentinel) lose every command on the primary
// (-@all; a user turned off would fall back to the default user on a
// failed AUTH) and their connections are killed, so they reconnect to
// find every command refused (PING too: Sentinel sees no valid reply) and
// cannot resume; the workers (the default user) still reach it. The links die at once, so
// min-replicas-to-write refuses writes at once; a network partition that
// only stalls them leaves the primary writable for up to
// min-replicas-max-lag (10 s by default), as min-replicas-to-write 0 does
// for the whole partition.
func (g *sentinelGroup) isolate(t *testing.T, p int, cut bool) {
	t.Helper()
	users := []string{"sentinel"}
	for i := range g.nodes {
		if i != p {
			users = append(users, nodeUser(i))
		}
	}
	for _, u := range users {
		if cut {
			mustDo(t, g.nodes[p], "ACL", "SETUSER", u, "-@all")
			mustDo(t, g.nodes[p], "CLIENT", "KILL", "USER", u)
		} else {
			mustDo(t, g.nodes[p], "ACL", "SETUSER", u, "+@all")
		}
	}
	if cut {
		// A Sentinel's links opened before its auth-user was set are
		// the default user's; they are named sentinel-<id>-cmd/pubsub.
		for line := range strings.Lines(mustDo(t, g.nodes[p], "CLIENT", "LIST")) {
			var id, name string
			for f := range strings.FieldsSeq(line) {
				if v, ok := strings.CutPrefix(f, "id="); ok {
					id = v
				} else if v, ok := strings.CutPrefix(f, "name="); ok {
					name = v
				}
			}
			if strings.HasPrefix(name, "sentinel-") {
				mustDo(t, g.nodes[p], "CLIENT", "KILL", "ID", id)
			}
		}
	}
}

// setMinReplicas sets min-replicas-to-write on every node.
func (g *sentinelGroup) setMinReplicas(t *testing.T, n int) {
	t.Helper()
	for _, s := range g.nodes {
		mustDo(t, s, "CONFIG", "SET", "min-replicas-to-write", strconv.Itoa(n))
	}
}

// minorityID is the worker on the old primary's side of a partition: a
// client that reaches the old primary and no Sentinel (or only Sentinels
// on that side, which still name it), so it keeps the old primary. It is
// a client of the old primary's address (-store valkey): a Sentinel client
// cut from the Sentinels by its proxies would still find them, at the
// addresses they gave it (valkey-go adds the Sentinels it learns of).
const minorityID = 1

// testSentinelPartition: three workers loop (for a fixed time), workers
// 2 and 3 through the Sentinels, worker 1 on the primary's side (see
// minorityID). The primary is cut from its replicas and the Sentinels:
// Sentinel promotes the preferred replica and workers 2 and 3 follow it.
// Once they took grants on the new primary the partition heals: Sentinel
// turns the old primary into a replica of the new one (its writes since
// the cut are lost). With min-replicas-to-write 0 the old primary keeps
// granting worker 1 the lock while the new one grants the others (two
// primaries at once); with 1 it refuses every write from the cut. Under
// WithWaitReplicas(2) all three workers follow the Sentinels.
func testSentinelPartition(t *testing.T, g *sentinelGroup, c partitionCase) {
	g.ready(t)
	old := g.primary
	e := newEnvOn(t, true, g.sentinels...)
	e.store = "sentinel"
	if c.waitAll {
		e.args = []string{"-opt", "wait-replicas=2", "-opt", "wait-timeout=500ms"}
	}
	if c.minReplicas {
		g.setMinReplicas(t, 1)
	}
	healed := false
	t.Cleanup(func() {
		if !healed {
			g.isolate(t, old, false)
		}
		if g.primary != old {
			waitInfo(t, g.nodes[old], "replication", "master_link_status", "up")
		}
		g.setMinReplicas(t, 0)
	})
	dur := 8 * time.Second
	if long() {
		dur = 30 * time.Second
	}
	var ws []*worker
	for i := range 3 {
		args := []string{"-key", uniqueKey(t), "-ttl", looperTTL.String(), "-autorenew", "-careful",
			"-op-timeout", "300ms", "-wait", "30s", "-iters", "100000", "-duration", dur.String(),
			"-rmw", "-hold", "10ms", "-gap", "100ms"}
		if i+1 == minorityID && !c.waitAll {
			// Later flags win: a plain client of the old primary, whose
			// acquires fail fast once it is a replica (READONLY).
			args = append(args, "-store", "valkey", "-addrs", g.nodes[old].Addr(), "-wait", "2s")
		}
		ws = append(ws, e.spawn(i+1, args...))
	}
	if _, ok := ws[0].waitEvent(30*time.Second, func(ev wire.Event) bool { return ev.Kind == wire.KindAcquire && ev.Iter >= 5 }); !ok {
		t.Fatalf("worker 1 made no progress\n%s", ws[0].stderrText())
	}
	cut := wire.Now()
	g.isolate(t, old, true)
	g.primary = g.waitFailover(t, old)
	failover := wire.Now()
	t.Logf("failover %.1fs after the cut", float64(failover-cut)/1e9)
	// The partition lasts until workers 2 and 3 took 5 grants each on
	// the new primary (and, with min-replicas-to-write 0, worker 1 one on
	// the old primary after the failover: two primaries granting at
	// once). Under WithWaitReplicas(2) the new primary grants nothing
	// before the old one rejoins as its second replica: the heal comes at
	// once.
	if !c.waitAll && !e.waitHistory(30*time.Second, func(evs []wire.Event) bool {
		n := map[int]int{}
		for _, ev := range evs {
			if ev.Kind == wire.KindAcquire && ev.T > failover {
				n[ev.W]++
			}
		}
		return n[2] >= 5 && n[3] >= 5 && (c.minReplicas || n[minorityID] >= 1)
	}) {
		t.Fatalf("within 30s of the failover, workers 2 and 3 did not take 5 grants each on the new primary (or worker 1 none on the old one)")
	}
	g.isolate(t, old, false)
	healed = true
	rejoined := wire.Now()
	t.Logf("healed %.1fs after the failover", float64(rejoined-failover)/1e9)
	waitInfo(t, g.nodes[old], "replication", "role", "slave")
	e.fault("%s", partitionFaultText(c))
	e.waitAll(dur + 2*time.Minute)
	t.Logf("workers done %.1fs after the heal", float64(wire.Now()-rejoined)/1e9)
	evs := e.history()
	r := e.measure()
	t.Logf("checked %.1fs after the heal", float64(wire.Now()-rejoined)/1e9)
	onOld := 0 // worker 1's grants asked for after the cut: on the old primary
	for _, gr := range grants(evs) {
		if gr.W == minorityID && gr.Invoke > cut && !c.waitAll {
			onOld++
		}
	}
	for _, w := range ws {
		if w.id != minorityID || c.waitAll {
			followedAfter(t, evs, rejoined, w.id)
		}
	}
	valid := validOverlaps(evs)
	promised := c.waitAll
	r.Promise = "not promised"
	if promised {
		r.Promise = "none promised"
	}
	r.Extra = fmt.Sprintf("worker 1's grants on the old primary after the cut %d; overlaps of valid leases %d", onOld, valid)
	switch {
	case !c.minReplicas && onOld == 0:
		t.Errorf("worker 1 took no grant on the old primary during the partition: the split brain min-replicas-to-write 0 allows did not happen")
	case c.minReplicas && onOld != 0:
		t.Errorf("worker 1 took %d grants on the old primary after the cut, want 0 (min-replicas-to-write 1)", onOld)
	}
	if c.minReplicas {
		requireSafe(t, r)
	}
	if promised && valid != 0 {
		t.Errorf("overlaps of valid leases = %d, want 0: every grant was confirmed by both replicas", valid)
	}
	e.record(r)
}

// followedAfter fails t unless worker w took a grant after since: its
// client found the primary of the healed group.
func followedAfter(t *testing.T, evs []wire.Event, since int64, w int) {
	t.Helper()
	for _, ev := range evs {
		if ev.Kind == wire.KindAcquire && ev.W == w && ev.T > since {
			return
		}
	}
	t.Errorf("worker %d took no grant after the partition healed: its client did not follow the new primary", w)
}

func partitionFaultText(c partitionCase) string {
	s := "store/valkey through valkey-go's Sentinel client"
	if c.waitAll {
		s += " with WithWaitReplicas(2, 500ms)"
	}
	mr := "0"
	if c.minReplicas {
		mr = "1"
	}
	s += "; min-replicas-to-write " + mr + "; the primary cut from both replicas and the 3 Sentinels (their users lose every command on it, ACL -@all, their links killed); "
	if c.waitAll {
		return s + "all 3 workers follow the promoted replica; heal once it is promoted: Sentinel makes the old primary a replica"
	}
	return s + "worker 1 a client of the old primary's address (the primary's side), workers 2 and 3 follow the promoted replica; heal: Sentinel makes the old primary a replica"
}
