package faults

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

// The consensus stores' scenarios (T31 etcd, T32 ZooKeeper; issue 36) share
// one shape with T26/T27: three careful, auto-renewed loopers take a lock
// over and over and read-modify-write the fenced register; a careless
// holder takes the lock, reads, and stops itself (SIGSTOP) before its
// write; the fault strikes while it holds. The holder stays stopped past its
// lease's TTL (etcd) or its session timeout (ZooKeeper), so the store ends
// its hold, a looper takes the lock and reads, and only then is the holder
// resumed: its write is stale and the fenced register must refuse it.
//
// A consensus store promises exclusion: no two leases valid at once (each
// clipped where the Locker said its validity ends), whatever the fault. A
// store that forgot the holder's grant in the fault (a leader that lost a
// committed write, a minority that granted) would let a looper in while the
// holder's lease was still valid: an overlap of valid leases, which fails
// the scenario. Negative control, per fault class: the same fault with an
// unfenced register must take the holder's stale write (and lose an
// update), which proves the holder's hold really ended and the fault bit.

// consWorker is where one worker of a consensus run connects.
type consWorker struct {
	addrs []string
	opts  []string // extra flags (-opt ...)
}

// consRun is one T31/T32 run.
type consRun struct {
	e         *env
	key       string
	holderTTL time.Duration
	loopers   []*worker
	holder    *worker
}

// consLooperTTL is the loopers' TTL (auto-renewed every third of it).
const consLooperTTL = 2 * time.Second

// newConsEnv is an env for a consensus store: no Redis nodes; each worker
// gets its own -addrs.
func newConsEnv(t *testing.T, fenced bool, storeName string) *env {
	t.Helper()
	e := newEnvOn(t, fenced)
	e.store = storeName
	return e
}

// spawnAt starts worker id connected to cw.addrs only (the -addrs given
// here win over the empty one start adds: the last flag counts).
func (e *env) spawnAt(id int, cw consWorker, args ...string) *worker {
	e.t.Helper()
	argv := append(append([]string{}, args...), cw.opts...)
	argv = append(argv, "-addrs", strings.Join(cw.addrs, ","))
	return e.prepare(id).start(argv...)
}

// startConsRun starts the loopers (one per entry of loopers) and the
// holder (TTL holderTTL, no renewal) together: the holder takes the lock
// among the loopers' grants (each looper leaves it free for 100ms between
// two), reads the register and stops itself before its write. (Waiting for
// the loopers' progress before starting the holder let them use up their
// grants while the holder's client connected.)
func startConsRun(t *testing.T, e *env, loopers []consWorker, holder consWorker, holderTTL time.Duration) *consRun {
	t.Helper()
	run := &consRun{e: e, key: uniqueKey(t), holderTTL: holderTTL}
	iters := 12
	if long() {
		iters = 100
	}
	for i, cw := range loopers {
		run.loopers = append(run.loopers, e.spawnAt(i+1, cw,
			"-key", run.key, "-ttl", consLooperTTL.String(), "-autorenew", "-careful", "-op-timeout", "500ms", "-wait", "30s",
			"-iters", strconv.Itoa(iters), "-duration", "2m", "-rmw", "-hold", "5ms", "-gap", "100ms"))
	}
	run.holder = e.spawnAt(holderID, holder, "-key", run.key, "-ttl", holderTTL.String(), "-wait", "30s", "-iters", "1", "-rmw",
		"-stop-iter", "0", "-stop-at", "write")
	run.holder.waitStopped(60 * time.Second)
	for _, w := range run.loopers {
		if _, done := w.waitEvent(0, isKind(wire.KindDone)); done {
			t.Fatalf("worker %d ended its %d grants before the holder got the lock: the fault would strike no workload", w.id, iters)
		}
	}
	return run
}

// resumeAfterNewHolderRead resumes the holder once a looper has read the
// register, accepted, under a grant acquired after since (the holder's hold
// has ended by then, or exclusion is broken), and waits for the holder's
// write.
func (run *consRun) resumeAfterNewHolderRead(t *testing.T, since int64) {
	t.Helper()
	sr := &storeRun{e: run.e, key: run.key, loopers: run.loopers, holder: run.holder}
	sr.resumeAfterNewHolderRead(t, since)
	if _, ok := run.holder.waitEvent(60*time.Second, isKind(wire.KindWrite)); !ok {
		t.Fatalf("the resumed holder never wrote\n%s", run.holder.stderrText())
	}
}

// leaseEnd is where a grant's validity ends: the validity left when it was
// granted (Lease.TTL, in the acquire event) from the grant, pushed on by
// each successful renewal (from the renewal's report, less the drift
// allowance), and cut short by the grant's exit or loss.
func leaseEnd(g grant, left int64, evs []wire.Event, ttl time.Duration) int64 {
	end := g.Acquired + left
	margin := time.Duration(float64(ttl)*0.01) + 2*time.Millisecond
	for _, ev := range evs {
		if ev.W == g.W && ev.Kind == wire.KindRenew && ev.Result == "ok" && ev.T > g.Acquired && ev.T < g.Exit {
			end = max(end, ev.T+int64(ttl-margin))
		}
	}
	end = min(end, g.Exit)
	if g.Lost != 0 {
		end = min(end, g.Lost)
	}
	return end
}

// consValidOverlaps counts pairs of critical sections of different workers
// that overlapped while both leases were valid (leaseEnd), and describes
// the first.
func consValidOverlaps(evs []wire.Event, holderTTL time.Duration) (int, string) {
	left := map[key]int64{}
	for _, ev := range evs {
		if ev.Kind == wire.KindAcquire {
			left[key{ev.W, ev.Iter}] = ev.Val
		}
	}
	gs := grants(evs)
	end := make([]int64, len(gs))
	for i, g := range gs {
		ttl := consLooperTTL
		if g.W == holderID {
			ttl = holderTTL
		}
		end[i] = leaseEnd(g, left[key{g.W, g.Iter}], evs, ttl)
	}
	n, first := 0, ""
	for i := range gs {
		for j := i + 1; j < len(gs); j++ {
			a, b := gs[i], gs[j]
			if a.W == b.W {
				continue
			}
			if a.Enter < end[j] && b.Enter < end[i] {
				if n == 0 {
					first = fmt.Sprintf("w%d fence %d (entered %d, valid to %d) and w%d fence %d (entered %d, valid to %d)",
						a.W, a.Fence, a.Enter, end[i], b.W, b.Fence, b.Enter, end[j])
				}
				n++
			}
		}
	}
	return n, first
}

// judge checks a consensus run: no valid leases overlap, ever (the store
// promises exclusion); a fenced run is safe and refused the holder's stale
// write; an unfenced control took it and lost an update.
func (run *consRun) judge(t *testing.T, extra string) {
	t.Helper()
	e := run.e
	evs := e.history()
	r := e.measure()
	r.Promise = "none promised"
	valid, first := consValidOverlaps(evs, run.holderTTL)
	// The holder's fence, and the lowest of the grants after it: the
	// next holder's fence must be above the holder's.
	var holderFence int64
	minAfter := int64(-1)
	for _, g := range grants(evs) {
		switch {
		case g.W == holderID:
			holderFence = g.Fence
		case holderFence != 0 && (minAfter < 0 || g.Fence < minAfter):
			minAfter = g.Fence
		}
	}
	r.Extra = fmt.Sprintf("overlaps of valid leases %d; holder's fence %d, next %d (%+d)", valid, holderFence, minAfter, minAfter-holderFence)
	if extra != "" {
		r.Extra += "; " + extra
	}
	if valid != 0 {
		t.Errorf("overlaps of valid leases = %d, want 0 (a consensus store promises exclusion); first: %s", valid, first)
	}
	if e.reg.fenced {
		requireSafe(t, r)
		if r.Lost != 0 {
			t.Errorf("lost updates = %d, want 0", r.Lost)
		}
		if r.StaleRejected == 0 {
			t.Errorf("stale writes rejected = 0, want >= 1: the holder whose hold the store ended wrote after the next holder read, and its write must be refused")
		}
	} else {
		requireDetected(t, "stale writes accepted (unfenced register)", r.StaleAccepted)
		requireDetected(t, "lost updates (unfenced register)", r.Lost)
		if r.FenceDups != 0 || r.FenceOrder != 0 {
			t.Errorf("fence violations: %d repeated, %d out of order; want 0", r.FenceDups, r.FenceOrder)
		}
	}
	e.record(r)
}

// grantsBetween returns worker w's grants asked for at or after from (the
// acquire call began) and granted by to. A call that began before from
// may have been granted before it.
func grantsBetween(evs []wire.Event, w int, from, to int64) []grant {
	var out []grant
	for _, g := range grants(evs) {
		if g.W == w && g.Invoke >= from && g.Acquired <= to {
			out = append(out, g)
		}
	}
	return out
}

// failsBetween counts worker w's failed acquires that ended in [from, to].
func failsBetween(evs []wire.Event, w int, from, to int64) int {
	n := 0
	for _, ev := range evs {
		if ev.W == w && ev.Kind == wire.KindFail && ev.T >= from && ev.T <= to {
			n++
		}
	}
	return n
}
