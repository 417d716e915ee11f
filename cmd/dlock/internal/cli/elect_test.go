//go:build linux

package cli

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// electScript prints "started PID TERM" and runs until its stdin (the
// test's pipe to dlock) closes.
const electScript = `echo "started $$ $DLOCK_TERM $DLOCK_FENCE"; read x; echo done`

type started struct {
	p         *dlockProc
	pid       int
	term      int64
	at        time.Time
	fenceSame bool
}

// nextStart waits for the next "started" line from any of procs.
func nextStart(t *testing.T, procs []*dlockProc) started {
	t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	cases := make(chan started, len(procs))
	stop := make(chan struct{})
	defer close(stop)
	for _, p := range procs {
		go func() {
			for {
				select {
				case l := <-p.lines:
					f := strings.Fields(l)
					if len(f) == 4 && f[0] == "started" {
						pid, _ := strconv.Atoi(f[1])
						term, _ := strconv.ParseInt(f[2], 10, 64)
						cases <- started{p: p, pid: pid, term: term, at: time.Now(), fenceSame: f[2] == f[3]}
						return
					}
				case <-p.done:
					return
				case <-stop:
					return
				}
			}
		}()
	}
	select {
	case s := <-cases:
		if !s.fenceSame || s.term <= 0 {
			t.Errorf("child environment: DLOCK_TERM %d, want a positive term equal to DLOCK_FENCE", s.term)
		}
		return s
	case <-timeout.C:
		t.Fatal("no dlock elect started its command within a minute")
	}
	return started{}
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestElectThreeCandidates runs three `dlock elect` on one Valkey: exactly
// one runs its command; when the leader is killed (SIGKILL, so it cannot
// resign), its command dies with it and a standby takes over within the
// TTL with a higher term; when the next leader's command exits, it resigns
// and the last standby takes over at once.
func TestElectThreeCandidates(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	const ttl = 2 * time.Second
	var procs []*dlockProc
	for range 3 {
		procs = append(procs, startDlock(t, env, "elect", "--ttl", ttl.String(), name, "--", "sh", "-c", electScript))
	}
	first := nextStart(t, procs)
	rest := without(procs, first.p)

	// Kill the leader: its command dies with it (PR_SET_PDEATHSIG), and
	// its leadership runs out on the store.
	killed := time.Now()
	first.p.signal(syscall.SIGKILL)
	first.p.wait()
	second := nextStart(t, rest)
	takeover := second.at.Sub(killed)
	t.Logf("takeover after the leader was killed: %v (TTL %v)", takeover.Round(time.Millisecond), ttl)
	if alive(first.pid) {
		t.Errorf("the killed leader's command (pid %d) still runs beside the new leader's", first.pid)
	}
	if second.term <= first.term {
		t.Errorf("new term %d, want > %d", second.term, first.term)
	}
	// Within the TTL, with a margin for a loaded machine: the store frees
	// the name at the TTL after the last renewal, before the kill.
	if takeover > ttl+5*time.Second {
		t.Errorf("takeover took %v, want about the TTL %v", takeover, ttl)
	}

	// A clean exit: the leader resigns and the last standby starts at once.
	last := without(rest, second.p)[0]
	resigned := time.Now()
	second.p.stdin.Close()
	if code := second.p.wait(); code != 0 {
		t.Fatalf("leader whose command exited 0 exited %d; stderr:\n%s", code, second.p.stderr.String())
	}
	third := nextStart(t, []*dlockProc{last})
	t.Logf("handover after the leader's command exited: %v", third.at.Sub(resigned).Round(time.Millisecond))
	if alive(second.pid) {
		t.Errorf("the resigned leader's command (pid %d) still runs", second.pid)
	}
	if third.term <= second.term {
		t.Errorf("third term %d, want > %d", third.term, second.term)
	}
	last.stdin.Close()
	if code := last.wait(); code != 0 {
		t.Fatalf("last leader exited %d; stderr:\n%s", code, last.stderr.String())
	}
	if v, err := srv.Do("EXISTS", "lock:"+name); err != nil || v != "0" {
		t.Errorf("EXISTS lock:%s after the last leader resigned = %q, %v; want 0", name, v, err)
	}
}

func without(procs []*dlockProc, p *dlockProc) []*dlockProc {
	var out []*dlockProc
	for _, q := range procs {
		if q != p {
			out = append(out, q)
		}
	}
	return out
}

// TestElectWaitAndUnsupported: a standby with --wait gives up with 75
// while another leads; a store without elections (a remote server) exits 64.
func TestElectWaitAndUnsupported(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	leader := startDlock(t, env, "elect", name, "--", "sh", "-c", electScript)
	nextStart(t, []*dlockProc{leader})
	code, out, stderr := runDlock(t, env, "elect", "--wait", "200ms", name, "--", "echo", "ran")
	if code != runner.ExitLocked || out != "" || !strings.Contains(stderr, "an election hold") {
		t.Errorf("standby with --wait = %d, stdout %q, stderr %q; want %d without running", code, out, stderr, runner.ExitLocked)
	}
	leader.stdin.Close()
	leader.wait()

	// A remote dlock serve has no elections; the store is not even dialled.
	remote := []string{"DLOCK_SERVER=http://127.0.0.1:1"}
	if code, _, stderr := runDlock(t, remote, "elect", name, "--", "echo", "ran"); code != runner.ExitUsage || !strings.Contains(stderr, "not supported") {
		t.Errorf("dlock elect on a remote server = %d, stderr %q; want %d, not supported", code, stderr, runner.ExitUsage)
	}
}

// TestElectMessages: dlock elect without a store lists the stores it can
// run on, not --server (which it refuses), and --verbose says "elected"
// with the term rather than "lock acquired".
func TestElectMessages(t *testing.T) {
	code, _, stderr := runDlock(t, nil, "elect", uniqueName(t), "--", "true")
	if code != runner.ExitUsage || !strings.Contains(stderr, "--redis-url") || strings.Contains(stderr, "--server") {
		t.Errorf("dlock elect without a store = %d, stderr %q; want %d listing the stores, without --server", code, stderr, runner.ExitUsage)
	}
	srv := testredis.Start(t)
	code, _, stderr = runDlock(t, []string{"DLOCK_REDIS_URL=" + srv.URL()}, "elect", "--verbose", uniqueName(t), "--", "true")
	if code != 0 || !strings.Contains(stderr, `msg="dlock: elected"`) || !strings.Contains(stderr, "term=") || strings.Contains(stderr, "lock acquired") {
		t.Errorf("dlock elect --verbose = %d, stderr %q; want 0 and \"dlock: elected\" with the term", code, stderr)
	}
}

// TestElectOnRedlock runs dlock elect on a Redlock store over three
// redis-servers: one candidate runs its command, a standby with --wait
// gives up; when the leader's command exits a waiting standby is elected
// with a higher term, and when that leader is killed (SIGKILL) the last
// standby takes over within the TTL; nothing is left on any node.
func TestElectOnRedlock(t *testing.T) {
	srvs := []*testredis.Server{testredis.Start(t), testredis.Start(t), testredis.Start(t)}
	env := []string{"DLOCK_REDLOCK_URLS=" + srvs[0].URL() + "," + srvs[1].URL() + "," + srvs[2].URL()}
	name := uniqueName(t)
	const ttl = 2 * time.Second
	elect := func() *dlockProc {
		return startDlock(t, env, "elect", "--ttl", ttl.String(), name, "--", "sh", "-c", electScript)
	}
	leader := elect()
	first := nextStart(t, []*dlockProc{leader})
	code, out, stderr := runDlock(t, env, "elect", "--wait", "200ms", name, "--", "echo", "ran")
	if code != runner.ExitLocked || out != "" {
		t.Errorf("standby with --wait on redlock = %d, stdout %q, stderr %q; want %d without running", code, out, stderr, runner.ExitLocked)
	}
	standbys := []*dlockProc{elect(), elect()}
	resigned := time.Now()
	leader.stdin.Close()
	if code := leader.wait(); code != 0 {
		t.Fatalf("leader on redlock exited %d; stderr:\n%s", code, leader.stderr.String())
	}
	second := nextStart(t, standbys)
	t.Logf("handover on redlock after the leader's command exited: %v", second.at.Sub(resigned).Round(time.Millisecond))
	if second.term <= first.term {
		t.Errorf("second term %d, want > %d", second.term, first.term)
	}

	last := without(standbys, second.p)[0]
	killed := time.Now()
	second.p.signal(syscall.SIGKILL)
	second.p.wait()
	third := nextStart(t, []*dlockProc{last})
	takeover := third.at.Sub(killed)
	t.Logf("takeover on redlock after the leader was killed: %v (TTL %v)", takeover.Round(time.Millisecond), ttl)
	if alive(second.pid) {
		t.Errorf("the killed leader's command (pid %d) still runs beside the new leader's", second.pid)
	}
	if third.term <= second.term {
		t.Errorf("third term %d, want > %d", third.term, second.term)
	}
	// Within the TTL, with a margin for a loaded machine.
	if takeover > ttl+5*time.Second {
		t.Errorf("takeover took %v, want about the TTL %v", takeover, ttl)
	}
	last.stdin.Close()
	if code := last.wait(); code != 0 {
		t.Fatalf("last leader on redlock exited %d; stderr:\n%s", code, last.stderr.String())
	}
	// Its releases were sent before it exited; a loaded node may run the
	// last of them a moment later. Far within the TTL: none expired.
	for i, srv := range srvs {
		deadline := time.Now().Add(ttl / 2)
		for {
			v, err := srv.Do("EXISTS", "lock:"+name)
			if err == nil && v == "0" {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("node %d: EXISTS lock:%s %v after the last leader resigned = %q, %v; want 0", i, name, ttl/2, v, err)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
