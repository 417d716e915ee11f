package faults

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

func TestFaultsPatterns(t *testing.T) {
	for _, seed := range seeds() {
		t.Run(fmt.Sprintf("T17_rw_under_pauses/seed%d", seed), func(t *testing.T) { testRWPauses(t, seed) })
	}
	repeat(t, "T18_fair_dead_head_waiter", testFairDeadHead)
}

// validEnd is when g's lease ended at the latest, as far as its holder could
// know: its last confirmed grant or renewal plus the TTL less the drift
// margin, or the holder's own exit or loss if sooner. (A renewal's time is
// when its reply came back, a little after it was sent, so this errs late:
// it can only make an overlap appear, never hide one.)
func validEnd(g grant, evs []wire.Event, ttl time.Duration, drift float64) int64 {
	last := g.Acquired
	for _, ev := range evs {
		if ev.W == g.W && ev.Kind == wire.KindRenew && ev.Result == "ok" && ev.T > g.Acquired && ev.T < g.Exit {
			last = max(last, ev.T)
		}
	}
	margin := time.Duration(float64(ttl)*drift) + 2*time.Millisecond
	end := min(g.Exit, last+int64(ttl-margin))
	if g.Lost != 0 {
		end = min(end, g.Lost)
	}
	return end
}

// T17: four readers and two writers (auto-renewed, TTL 1s) under random
// SIGSTOPs of 1.2-1.8s. While leases are valid, a writer never shares the
// lock with anyone; writes are fenced.
func testRWPauses(t *testing.T, seed uint64) {
	e := newEnv(t, 1, true)
	const ttl = time.Second
	run := 5 * time.Second
	if long() {
		run = 20 * time.Second
	}
	var ws []*worker
	for i := range 6 {
		mode, extra := "read", []string{"-gap", "5ms"}
		if i >= 4 {
			mode, extra = "write", []string{"-rmw", "-gap", "100ms"}
		}
		args := append([]string{"-mode", mode, "-ttl", ttl.String(), "-autorenew", "-careful", "-queue-ttl", "1s",
			"-wait", "3s", "-iters", "100000", "-duration", run.String(), "-hold", "20ms"}, extra...)
		ws = append(ws, e.spawn(i+1, args...))
	}
	for _, w := range ws {
		if _, ok := w.waitEvent(10*time.Second, isKind(wire.KindStart)); !ok {
			t.Fatalf("worker %d never started\n%s", w.id, w.stderrText())
		}
	}
	// Pauses overlap: every 200-500ms a worker that is not already stopped
	// is stopped for 1.2-1.8s.
	rng := rand.New(rand.NewPCG(seed, 17))
	var wg sync.WaitGroup
	var mu sync.Mutex
	paused := map[int]bool{}
	pauses := 0
	for deadline := time.Now().Add(run); time.Now().Before(deadline); {
		time.Sleep(time.Duration(200+rng.IntN(300)) * time.Millisecond)
		w := ws[rng.IntN(len(ws))]
		d := time.Duration(1200+rng.IntN(600)) * time.Millisecond
		mu.Lock()
		busy := paused[w.id]
		paused[w.id] = true
		mu.Unlock()
		select {
		case <-w.exited:
			busy = true
		default:
		}
		if busy {
			continue
		}
		pauses++
		w.cmd.Process.Signal(syscall.SIGSTOP)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(d)
			w.cmd.Process.Signal(syscall.SIGCONT)
			mu.Lock()
			paused[w.id] = false
			mu.Unlock()
		}()
	}
	wg.Wait()
	e.fault("SIGSTOP a random reader or writer for 1.2-1.8s every 0.2-0.5s (TTL 1s, seed %d)", seed)
	e.waitAll(time.Minute)

	evs := e.history()
	gs := grants(evs)
	violations, reads, writes := 0, 0, 0
	for i := range gs {
		if gs[i].exclusive() {
			writes++
		} else {
			reads++
		}
		for j := i + 1; j < len(gs); j++ {
			a, b := gs[i], gs[j]
			if a.W == b.W || (!a.exclusive() && !b.exclusive()) {
				continue
			}
			if a.Enter < validEnd(b, evs, ttl, 0.01) && b.Enter < validEnd(a, evs, ttl, 0.01) {
				violations++
			}
		}
	}
	r := e.measure()
	r.Extra = fmt.Sprintf("%d pauses; %d read and %d write grants; writer shared the lock while valid: %d", pauses, reads, writes, violations)
	if violations != 0 {
		t.Errorf("a writer shared the lock with a valid lease %d times, want 0", violations)
	}
	if writes == 0 || reads == 0 {
		t.Errorf("reads %d, writes %d: want both", reads, writes)
	}
	if r.Lost != 0 {
		t.Errorf("lost updates = %d, want 0", r.Lost)
	}
	requireSafe(t, r)
	e.record(r)
}

// T18: a holder keeps the fair lock while four waiters queue in a known
// order; the head waiter is then SIGKILLed. After the holder releases, the
// dead head costs at most its queue TTL (plus one lease TTL if the lock was
// handed to it before it was pruned), and the live waiters get the lock in
// arrival order.
func testFairDeadHead(t *testing.T) {
	e := newEnv(t, 1, true)
	const queueTTL, ttl = time.Second, time.Second
	// The holder stops itself in its critical section (TTL 5s, renewed)
	// until the queue is set up, then releases at once.
	h := e.spawn(1, "-mode", "fair", "-ttl", "5s", "-autorenew", "-iters", "1", "-rmw", "-stop-iter", "0", "-stop-at", "enter")
	h.waitStopped(10 * time.Second)
	var waiters []*worker
	for k := 2; k <= 5; k++ {
		w := e.spawn(k, "-mode", "fair", "-ttl", ttl.String(), "-queue-ttl", queueTTL.String(), "-wait", "15s", "-iters", "1", "-hold", "50ms", "-rmw")
		waiters = append(waiters, w)
		// Bounded polling of the server: the waiter has queued.
		queued := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if n, err := e.nodes[0].Do("ZCARD", "{"+lockKey+"}:fair:queue"); err == nil && n == strconv.Itoa(k-1) {
				queued = true
				break
			}
		}
		if !queued {
			t.Fatalf("waiter %d never queued\n%s", k, w.stderrText())
		}
	}
	waiters[0].crash()
	h.resume()
	e.fault("SIGKILL the head of the fair queue just before the holder releases (queue TTL 1s, TTL 1s)")
	e.waitAll(time.Minute)

	hRel, _ := h.waitEvent(time.Second, isKind(wire.KindRelease))
	var order []int
	var first int64
	for _, g := range grants(e.history()) {
		if g.W == 1 {
			continue
		}
		order = append(order, g.W)
		if first == 0 {
			first = g.Acquired
		}
	}
	if fmt.Sprint(order) != "[3 4 5]" {
		t.Errorf("grant order of the live waiters = %v, want [3 4 5]", order)
	}
	delay := time.Duration(first - hRel.T)
	if bound := queueTTL + ttl + 500*time.Millisecond; delay > bound {
		t.Errorf("first live waiter got the lock %v after the release, want within %v", delay, bound)
	}
	r := e.measure()
	r.Extra = fmt.Sprintf("live waiters granted in order %v; the dead head delayed the next grant %v", order, delay.Round(time.Millisecond))
	if r.Overlaps != 0 || r.Lost != 0 {
		t.Errorf("overlaps = %d, lost updates = %d; want 0, 0", r.Overlaps, r.Lost)
	}
	requireSafe(t, r)
	e.record(r)
}
