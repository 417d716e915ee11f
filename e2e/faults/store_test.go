package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// The scenarios of this file make the store itself fail the way production
// stores do (issue 36, its Valkey/Redis rows): a node killed with kill -9
// and restarted under each persistence mode (T26), and a primary killed and
// a replica that lagged promoted (T27), while workers take, hold and
// release a lock and read-modify-write the fenced register. Each comes
// back, or fails over, with an earlier state of the lock's keys: a grant
// the workers were told of is gone, and the fence key is stale. Fences must
// still rise per name through every fault (the clock floor on every grant,
// docs/safety.md Claim 4), so no stale write reaches the fenced register;
// the overlaps a forgetting store allows are counted and shown.
//
// Negative controls: the same faults with the clock_lib.lua of 636d7c8
// (testdata/v636d7c8, swapped into the workers' scripts by the worker's
// -clock-lib flag), which took the clock floor only when the fence key was
// absent, must repeat fences; and the failover with an unfenced register
// must let the stale write in.

// oldClockLib is 636d7c8's clock_lib.lua, for the worker's -clock-lib.
func oldClockLib(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "v636d7c8", "clock_lib.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFaultsStore(t *testing.T) {
	t.Run("T26_node_restart", testRestartGroup)
	t.Run("T27_failover", testFailoverGroup)
}

// persistMode is a way a node persists and so what a kill -9 and restart
// bring back.
type persistMode struct {
	id, name string
	args     []string
	// forgets: the node comes back without the grant the holder was told
	// of (exclusion not promised through the restart).
	forgets bool
	// snapshot marks, while the workers run, the state the node comes
	// back with; the function it returns puts that state back after the
	// kill (both may do nothing).
	snapshot func(t *testing.T, srv *testredis.Server) func()
}

var persistModes = []persistMode{
	{"a", "none", nil, true, func(*testing.T, *testredis.Server) func() { return func() {} }},
	// Redis's default save points; the snapshot is taken by SAVE at a
	// known point of the run (the save points would take theirs minutes
	// later).
	{"b", "rdb", []string{"--save", "3600 1 300 100 60 10000"}, true, func(t *testing.T, srv *testredis.Server) func() {
		mustDo(t, srv, "SAVE")
		return func() {}
	}},
	// kill -9 of the process alone keeps what Redis handed the kernel; a
	// crash of the machine between fsyncs loses the unsynced tail. The
	// copy of appendonlydir taken at a point of the run, put back after
	// the kill, is what such a crash leaves (as store/valkey's
	// fence_restore_test.go models it).
	{"c", "aof-everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, true, aofSnapshot},
	{"d", "aof-always", []string{"--appendonly", "yes", "--appendfsync", "always"}, false,
		func(*testing.T, *testredis.Server) func() { return func() {} }},
}

// T26: one node, kill -9 and restart under each persistence mode. The
// servers start once for the group, one per mode; the negative control
// runs on the RDB node again (a lock name of its own).
func testRestartGroup(t *testing.T) {
	srvs := map[string]*testredis.Server{}
	for _, m := range persistModes {
		srvs[m.name] = testredis.Start(t, testredis.WithArgs(m.args...))
	}
	for _, m := range persistModes {
		repeat(t, "T26"+m.id+"_restart_"+m.name, func(t *testing.T) {
			testRestart(t, srvs[m.name], m, "")
		})
	}
	rdb := persistModes[1]
	repeat(t, "T26e_restart_rdb_no_floor_control", func(t *testing.T) {
		testRestart(t, srvs[rdb.name], rdb, oldClockLib(t))
	})
	if long() {
		everysec := persistModes[2]
		repeat(t, "T26f_restart_aof_everysec_no_floor_control", func(t *testing.T) {
			testRestart(t, srvs[everysec.name], everysec, oldClockLib(t))
		})
	}
}

// storeRun is one T26/T27 run: three looping workers and the holder that
// the fault catches, on lock key.
type storeRun struct {
	e        *env
	key      string
	clockLib string
	loopers  []*worker
	holder   *worker
}

const (
	looperTTL = 2 * time.Second
	holderTTL = 5 * time.Second
	holderID  = 9
)

// uniqueKey returns a lock name for t's run: scenarios of a group share
// servers, so each run takes its own name (its own fence key).
func uniqueKey(t *testing.T) string {
	return strings.NewReplacer("/", "-", "_", "-").Replace(shortName(t.Name()))
}

// startRun starts three careful, auto-renewed workers that loop on the
// lock (TTL 2s) and read-modify-write the register, waits until they have
// made progress, calls mark (the point the store will come back to), then
// starts the holder: a careless worker (TTL 5s, no renewal) that takes the
// lock, reads the register and stops itself before its write. The loopers
// queue behind it; the fault then strikes while it holds.
func startRun(t *testing.T, e *env, clockLib string, mark func()) *storeRun {
	t.Helper()
	// The loopers must still be at work when the holder, a process started
	// after them, gets the lock: 24 grants each ran out first now and then
	// with two busy loops beside the run (T26b, T26c, T27b).
	iters := 40
	if long() {
		iters = 150
	}
	return startRunIters(t, e, clockLib, iters, mark)
}

// startRunIters is startRun with iters grants per looper: a store whose
// clients take longer to start (a cluster client learning the topology)
// needs more, so that the loopers are still at work when the holder is.
func startRunIters(t *testing.T, e *env, clockLib string, iters int, mark func()) *storeRun {
	t.Helper()
	run := &storeRun{e: e, key: uniqueKey(t), clockLib: clockLib}
	common := []string{"-key", run.key}
	if clockLib != "" {
		common = append(common, "-clock-lib", clockLib)
	}
	for i := range 3 {
		run.loopers = append(run.loopers, e.spawn(i+1, append([]string{
			"-ttl", looperTTL.String(), "-autorenew", "-careful", "-op-timeout", "300ms", "-wait", "30s",
			"-iters", strconv.Itoa(iters), "-duration", "2m", "-rmw", "-hold", "5ms", "-gap", "25ms"}, common...)...))
	}
	w1 := run.loopers[0]
	if _, ok := w1.waitEvent(30*time.Second, func(ev wire.Event) bool { return ev.Kind == wire.KindAcquire && ev.Iter >= 5 }); !ok {
		t.Fatalf("worker 1 made no progress\n%s", w1.stderrText())
	}
	mark()
	run.holder = e.spawn(holderID, append([]string{"-ttl", holderTTL.String(), "-wait", "30s", "-iters", "1", "-rmw",
		"-stop-iter", "0", "-stop-at", "write"}, common...)...)
	run.holder.waitStopped(30 * time.Second)
	for _, w := range run.loopers {
		if _, done := w.waitEvent(0, isKind(wire.KindDone)); done {
			t.Fatalf("worker %d ended its %d grants before the holder got the lock: the fault would strike no workload", w.id, iters)
		}
	}
	return run
}

// resumeAfterNewHolderRead resumes the holder once a looper has read the
// register under a grant acquired after since: a holder whose grant the
// store forgot then writes after the next holder read, the stale write
// the fence must stop. A treatment waits for a read the register accepted
// (its fence is above the holder's); a no-floor control for any read (the
// register refuses the repeated fences below the holder's, and the workers
// may use up their grants on refusals before they pass it).
func (run *storeRun) resumeAfterNewHolderRead(t *testing.T, since int64) {
	t.Helper()
	accepted := run.clockLib == ""
	if !run.e.waitHistory(60*time.Second, func(evs []wire.Event) bool {
		granted := map[key]bool{}
		for _, ev := range evs {
			if ev.W == holderID {
				continue
			}
			switch {
			case ev.Kind == wire.KindAcquire && ev.T > since:
				granted[key{ev.W, ev.Iter}] = true
			case ev.Kind == wire.KindRead && (ev.Accepted || !accepted) && granted[key{ev.W, ev.Iter}]:
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no worker read the register under a grant after the fault\n%s", run.loopers[0].stderrText())
	}
	run.holder.resume()
}

// waitHistory polls the workers' events until pred holds, for at most
// timeout (a bounded wait on other processes).
func (e *env) waitHistory(timeout time.Duration, pred func([]wire.Event) bool) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if pred(e.history()) {
			return true
		}
	}
	return false
}

// validOverlaps counts pairs of exclusive critical sections of different
// workers that overlapped while both leases were valid (each section
// clipped at its last confirmed grant or renewal + TTL − drift): the
// overlaps a store that promises exclusion must not allow.
func validOverlaps(evs []wire.Event) int {
	gs := grants(evs)
	ttl := func(g grant) time.Duration {
		if g.W == holderID {
			return holderTTL
		}
		return looperTTL
	}
	n := 0
	for i := range gs {
		for j := i + 1; j < len(gs); j++ {
			a, b := gs[i], gs[j]
			if a.W == b.W {
				continue
			}
			if a.Enter < validEnd(b, evs, ttl(b), 0.01) && b.Enter < validEnd(a, evs, ttl(a), 0.01) {
				n++
			}
		}
	}
	return n
}

// fencesAround returns the highest fence of a grant acquired before at
// and the lowest of one acquired after it (-1 when none).
func fencesAround(evs []wire.Event, at int64) (maxBefore, minAfter int64) {
	minAfter = -1
	for _, g := range grants(evs) {
		if g.Acquired < at {
			maxBefore = max(maxBefore, g.Fence)
		} else if minAfter < 0 || g.Fence < minAfter {
			minAfter = g.Fence
		}
	}
	return maxBefore, minAfter
}

// judge checks a T26/T27 run's result: a treatment must be safe (no stale
// write accepted, fences unique and in order, register linearizable, no
// lost update) and, where the store forgot the holder's grant, must have
// refused the holder's stale write (the fault bit); where the store
// promises exclusion, no two valid leases may overlap. A no-floor control
// must repeat fences; an unfenced control must accept the stale write.
func (run *storeRun) judge(t *testing.T, r *result, forgot, promised bool, valid int) {
	t.Helper()
	switch {
	case run.clockLib != "":
		requireDetected(t, "fence repeats (636d7c8's clock_lib)", r.FenceDups)
	case !run.e.reg.fenced:
		requireDetected(t, "stale writes accepted (unfenced register)", r.StaleAccepted)
		requireDetected(t, "lost updates (unfenced register)", r.Lost)
	default:
		requireSafe(t, *r)
		if r.Lost != 0 {
			t.Errorf("lost updates = %d, want 0", r.Lost)
		}
		if forgot && r.StaleRejected == 0 {
			t.Errorf("stale writes rejected = 0, want >= 1: the holder whose grant the store forgot wrote after the next holder read, and its write must be refused")
		}
	}
	if promised && valid != 0 {
		t.Errorf("overlaps of valid leases = %d, want 0: the store kept the grant", valid)
	}
}

// testRestart: one node of the given persistence mode. Three workers loop;
// the mode's snapshot point is marked; the holder takes the lock, reads,
// and stops; the node is SIGKILLed and restarted (from the snapshot where
// the mode has one). Where the node forgot the holder's grant, the others
// take the lock at once and read the register; then the holder resumes
// and writes with its old fence. Under AOF always the grant survives, and
// the holder resumes at once, still holding.
func testRestart(t *testing.T, srv *testredis.Server, m persistMode, clockLib string) {
	e := newEnvOn(t, true, srv)
	restore := func() {}
	run := startRun(t, e, clockLib, func() { restore = m.snapshot(t, srv) })
	token := mustDo(t, srv, "GET", "lock:"+run.key)
	killed := wire.Now()
	srv.Kill()
	restore()
	srv.Restart(t)
	restarted := wire.Now()
	desc := "kill -9 the node while a holder holds (stopped before its write), restart " + map[string]string{
		"none":         "with no persistence (empty)",
		"rdb":          "from the RDB snapshot (SAVE) taken before the holder's grant",
		"aof-everysec": "from AOF everysec without its unsynced tail (appendonlydir copied before the holder's grant, put back)",
		"aof-always":   "from AOF always (every acknowledged write)",
	}[m.name]
	if clockLib != "" {
		desc += "; workers run 636d7c8's clock_lib (no clock floor while the fence key lives)"
	}
	e.fault("%s", desc)
	held := mustDo(t, srv, "GET", "lock:"+run.key) == token
	if m.name != "none" && mustDo(t, srv, "DBSIZE") == "0" {
		t.Fatalf("the node came back empty from %s: not a stale restore\n%s", m.name, srv.LogTail())
	}
	if held == m.forgets {
		t.Fatalf("after the restart from %s the holder's key exists = %v, want %v", m.name, held, !m.forgets)
	}
	if m.forgets {
		run.resumeAfterNewHolderRead(t, restarted)
	} else {
		run.holder.resume()
	}
	e.waitAll(3 * time.Minute)
	evs := e.history()
	r := e.measure()
	r.Promise = "not promised"
	if !m.forgets {
		r.Promise = "none promised"
	}
	valid := validOverlaps(evs)
	before, after := fencesAround(evs, killed)
	r.Extra = fmt.Sprintf("holder's grant kept: %v; overlaps of valid leases %d; max fence before the kill %d, min after %d (%+d)",
		held, valid, before, after, after-before)
	run.judge(t, &r, m.forgets, !m.forgets, valid)
	e.record(r)
}

// pair is a primary and its replica, shared by the failover scenarios:
// after a failover the old primary is restarted empty as the new
// primary's replica, and the roles swap.
type pair struct{ primary, replica *testredis.Server }

// T27: primary + replica; the replica's link is cut so it lags, the
// primary is killed, the replica promoted by hand (REPLICAOF NO ONE) and
// every worker's link moved to it (clients following the new primary).
// Two servers for the group; after each run the old primary rejoins as the
// new one's replica.
func testFailoverGroup(t *testing.T) {
	p := testredis.Start(t)
	pr := &pair{primary: p, replica: testredis.StartReplica(t, p)}
	repeat(t, "T27a_failover_lagging_replica", func(t *testing.T) { testFailover(t, pr, true, "") })
	repeat(t, "T27b_failover_lagging_replica_unfenced_control", func(t *testing.T) { testFailover(t, pr, false, "") })
	repeat(t, "T27c_failover_lagging_replica_no_floor_control", func(t *testing.T) { testFailover(t, pr, true, oldClockLib(t)) })
}

func testFailover(t *testing.T, pr *pair, fenced bool, clockLib string) {
	p, rep := pr.primary, pr.replica
	waitInfo(t, rep, "replication", "master_link_status", "up")
	e := newEnvOn(t, fenced, p)
	failedOver := false
	t.Cleanup(func() {
		if failedOver {
			pr.rejoin(t)
			return
		}
		// A run that ended before its failover leaves the pair as it
		// was, its link open again.
		p.Do("ACL", "SETUSER", "default", "+psync", "+sync")
	})
	run := startRun(t, e, clockLib, func() {
		// The replica has every write so far, then its link is cut:
		// it can neither resume nor resync, and lags from here on.
		if n := mustDo(t, p, "WAIT", "1", "5000"); n != "1" {
			t.Fatalf("WAIT 1 = %s, want 1", n)
		}
		mustDo(t, p, "ACL", "SETUSER", "default", "-psync", "-sync")
		mustDo(t, p, "CLIENT", "KILL", "TYPE", "replica")
		waitInfo(t, p, "replication", "connected_slaves", "0")
	})
	token := mustDo(t, p, "GET", "lock:"+run.key)
	killed := wire.Now()
	p.Kill()
	mustDo(t, rep, "REPLICAOF", "NO", "ONE")
	failedOver = true
	e.follow(rep)
	promoted := wire.Now()
	desc := "cut the replica's link (ACL -psync -sync, CLIENT KILL TYPE replica) after WAIT 1; a holder takes the lock and stops before its write; kill -9 the primary, REPLICAOF NO ONE on the replica, every client's link moved to it"
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
	evs := e.history()
	r := e.measure()
	r.Promise = "not promised"
	valid := validOverlaps(evs)
	before, after := fencesAround(evs, killed)
	r.Extra = fmt.Sprintf("overlaps of valid leases %d; max fence before the kill %d, min after %d (%+d)", valid, before, after, after-before)
	run.judge(t, &r, true, false, valid)
	e.record(r)
}

// follow moves every worker's link to node 0 onto srv (toxiproxy Update:
// the proxy closes its connections and listens again on the same port,
// its upstream now srv), as a client that follows a failover does.
func (e *env) follow(srv *testredis.Server) {
	e.t.Helper()
	e.mu.Lock()
	ws := append([]*worker(nil), e.workers...)
	e.mu.Unlock()
	for _, w := range ws {
		l := w.links[0]
		if err := l.Update(&toxiproxy.Proxy{Name: l.Name, Listen: l.Listen, Upstream: srv.Addr(), Enabled: true}); err != nil {
			e.t.Fatalf("move %s to %s: %v", l.Name, srv.Addr(), err)
		}
	}
	e.nodes[0] = srv
}

// rejoin restarts the killed primary empty as the promoted replica's
// replica and swaps the roles.
func (pr *pair) rejoin(t *testing.T) {
	old, promoted := pr.primary, pr.replica
	old.Restart(t)
	mustDo(t, old, "REPLICAOF", "127.0.0.1", strconv.Itoa(promoted.Port()))
	waitInfo(t, old, "replication", "master_link_status", "up")
	pr.primary, pr.replica = promoted, old
}

// mustDo runs one command on srv and fails t on an error.
func mustDo(t *testing.T, srv *testredis.Server, args ...string) string {
	t.Helper()
	v, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), srv.Addr(), err)
	}
	return v
}

// infoField returns field of an INFO reply.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

// waitInfo waits, for at most 30 s, until INFO section's field is want.
func waitInfo(t *testing.T, srv *testredis.Server, section, field, want string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		info, err := srv.Do("INFO", section)
		if got = infoField(info, field); err == nil && got == want {
			return
		}
	}
	t.Fatalf("%s: INFO %s %s = %q after 30s, want %q\n%s", srv.Addr(), section, field, got, want, srv.LogTail())
}

// aofSnapshot rewrites the AOF (so that its files hold every write made so
// far), copies appendonlydir, and returns a function that puts the copy
// back: what a crash of the machine that lost the unsynced tail leaves.
func aofSnapshot(t *testing.T, srv *testredis.Server) func() {
	t.Helper()
	mustDo(t, srv, "BGREWRITEAOF")
	var info string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info = mustDo(t, srv, "INFO", "persistence")
		if infoField(info, "aof_rewrite_in_progress") == "0" && infoField(info, "aof_rewrite_scheduled") == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("BGREWRITEAOF still running after 30s:\n%s", info)
		}
	}
	dir := filepath.Join(srv.Dir(), "appendonlydir")
	saved := t.TempDir()
	if err := os.CopyFS(saved, os.DirFS(dir)); err != nil {
		t.Fatalf("copy %s: %v", dir, err)
	}
	return func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(dir, os.DirFS(saved)); err != nil {
			t.Fatalf("put back %s: %v", dir, err)
		}
	}
}
