//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// holdScript prints "started FENCE" and holds the lock until its stdin
// (the test's pipe) closes.
const holdScript = `echo "started $DLOCK_FENCE"; read x; echo done`

func TestRunOneOfTwoConcurrentRunsHoldsTheLock(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	a := startDlock(t, env, "run", name, "--", "sh", "-c", holdScript)
	b := startDlock(t, env, "run", name, "--", "sh", "-c", holdScript)

	// The loser exits on its own; the winner waits for its stdin.
	var winner, loser *dlockProc
	select {
	case <-a.done:
		winner, loser = b, a
	case <-b.done:
		winner, loser = a, b
	}
	if code := loser.wait(); code != runner.ExitLocked {
		t.Fatalf("losing dlock run exited %d, want %d; stderr:\n%s", code, runner.ExitLocked, loser.stderr.String())
	}
	if out := loser.stdout(); out != "" {
		t.Errorf("losing dlock run's command ran: stdout %q", out)
	}
	if !strings.Contains(loser.stderr.String(), "held by someone else") {
		t.Errorf("losing dlock run's stderr = %q, want it to say the lock is held", loser.stderr.String())
	}
	if l := winner.line(); !strings.HasPrefix(l, "started ") {
		t.Fatalf("winner printed %q, want started", l)
	}
	winner.stdin.Close()
	if code := winner.wait(); code != 0 {
		t.Fatalf("winning dlock run exited %d, want 0; stderr:\n%s", code, winner.stderr.String())
	}
	// Released: the key is gone.
	if v, err := srv.Do("EXISTS", "lock:"+name); err != nil || v != "0" {
		t.Errorf("EXISTS lock:%s after the run = %q, %v; want 0", name, v, err)
	}
}

func TestRunWaitRunsOneAfterTheOther(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $(date +%s%N) $DLOCK_FENCE" >> "$LOG"; echo started; read x; echo "end $(date +%s%N)" >> "$LOG"`
	env = append(env, "LOG="+log)
	procs := []*dlockProc{
		startDlock(t, env, "run", "--wait", "1m", name, "--", "sh", "-c", script),
		startDlock(t, env, "run", "--wait", "1m", name, "--", "sh", "-c", script),
	}
	started := make(chan *dlockProc, 2)
	for _, p := range procs {
		go func() {
			select {
			case l := <-p.lines:
				if l == "started" {
					started <- p
				}
			case <-p.done:
			}
		}()
	}
	// awaitStart returns the process whose command started, failing if
	// one of waiting exits first.
	awaitStart := func(waiting ...*dlockProc) *dlockProc {
		t.Helper()
		for {
			select {
			case p := <-started:
				return p
			case <-waiting[0].done:
			case <-waiting[len(waiting)-1].done:
			}
			for _, p := range waiting {
				if p.exited() {
					t.Fatalf("dlock run exited %d before its command started; stderr:\n%s", p.code, p.stderr.String())
				}
			}
		}
	}
	first := awaitStart(procs...)
	second := procs[0]
	if second == first {
		second = procs[1]
	}
	if second.exited() {
		t.Fatalf("waiting dlock run exited %d; stderr:\n%s", second.code, second.stderr.String())
	}
	first.stdin.Close()
	if code := first.wait(); code != 0 {
		t.Fatalf("first dlock run exited %d; stderr:\n%s", code, first.stderr.String())
	}
	if p := awaitStart(second); p != second {
		t.Fatal("the first command started twice")
	}
	second.stdin.Close()
	if code := second.wait(); code != 0 {
		t.Fatalf("second dlock run exited %d; stderr:\n%s", code, second.stderr.String())
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 4 {
		t.Fatalf("log has %d lines, want 4:\n%s", len(lines), data)
	}
	var times [4]int64
	var fences [2]int64
	for i, l := range lines {
		f := strings.Fields(l)
		want := "start"
		if i%2 == 1 {
			want = "end"
		}
		if len(f) < 2 || f[0] != want {
			t.Fatalf("log line %d = %q, want %s ...; log:\n%s", i, l, want, data)
		}
		times[i], _ = strconv.ParseInt(f[1], 10, 64)
		if want == "start" {
			fences[i/2], _ = strconv.ParseInt(f[2], 10, 64)
		}
	}
	if !(times[0] <= times[1] && times[1] <= times[2] && times[2] <= times[3]) {
		t.Errorf("children overlapped: %v", times)
	}
	if fences[1] <= fences[0] {
		t.Errorf("second holder's fence %d is not above the first's %d", fences[1], fences[0])
	}
}

func TestRunLeaseLostStopsTheCommand(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	tests := []struct {
		name   string
		script string
		stdout string // what the command prints after "started"
	}{
		// The command handles SIGTERM and exits.
		{"sigterm", `trap 'echo terminated; exit 0' TERM; echo started; while :; do sleep 0.05; done`, "terminated"},
		// The command ignores SIGTERM and is killed after the grace period.
		{"sigkill", `trap '' TERM; echo started; exec sleep 1000`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := uniqueName(t)
			p := startDlock(t, env, "run", "--ttl", "1s", "--grace", "300ms", name, "--", "sh", "-c", tt.script)
			if l := p.line(); l != "started" {
				t.Fatalf("command printed %q, want started", l)
			}
			// Delete the lock underneath the running command.
			if v, err := srv.Do("DEL", "lock:"+name); err != nil || v != "1" {
				t.Fatalf("DEL lock:%s = %q, %v; want 1", name, v, err)
			}
			if code := p.wait(); code != runner.ExitLeaseLost {
				t.Fatalf("dlock run exited %d, want %d; stderr:\n%s", code, runner.ExitLeaseLost, p.stderr.String())
			}
			if !strings.Contains(p.stderr.String(), "lease lost") {
				t.Errorf("stderr = %q, want it to say the lease was lost", p.stderr.String())
			}
			if got, want := p.stdout(), strings.TrimSpace("started\n"+tt.stdout); got != want {
				t.Errorf("stdout = %q, want %q", got, want)
			}
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		command []string
		want    int
	}{
		{"zero", []string{"true"}, 0},
		{"one", []string{"false"}, 1},
		{"42", []string{"sh", "-c", "exit 42"}, 42},
		{"killed", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{"not found", []string{"dlock-no-such-command"}, runner.ExitNotFound},
		{"not executable", []string{noexec}, runner.ExitCannotExec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", uniqueName(t), "--"}, tt.command...)
			if code, _, stderr := runDlock(t, env, args...); code != tt.want {
				t.Errorf("dlock run -- %q exited %d, want %d; stderr:\n%s", tt.command, code, tt.want, stderr)
			}
		})
	}
}

func TestRunPassesEnvAndStdio(t *testing.T) {
	srv := testredis.Start(t)
	name := uniqueName(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL(), "DLOCK_FENCE=stale", "KEEP=kept"}
	p := startDlock(t, env, "run", name, "--", "sh", "-c",
		`echo "$DLOCK_NAME|$DLOCK_FENCE|${#DLOCK_TOKEN}|$KEEP"; read line; echo "got $line"; echo oops >&2`)
	l := p.line()
	f := strings.Split(l, "|")
	if len(f) != 4 || f[0] != name || f[2] != "32" || f[3] != "kept" {
		t.Fatalf("command saw %q, want NAME|FENCE|32|kept", l)
	}
	if fence, err := strconv.ParseInt(f[1], 10, 64); err != nil || fence <= 0 {
		t.Errorf("DLOCK_FENCE = %q, want a positive integer", f[1])
	}
	p.stdin.Write([]byte("hello\n"))
	if l := p.line(); l != "got hello" {
		t.Errorf("command printed %q, want got hello", l)
	}
	p.stdin.Close()
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(p.stderr.String(), "oops") {
		t.Errorf("stderr = %q, want the command's stderr", p.stderr.String())
	}
}

func TestRunForwardsSignals(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			// A foreground loop, not "sleep & wait": sh may miss a signal
			// that arrives while it forks a background job, leaving it behind.
			script := `for s in TERM INT HUP; do trap "echo got $s; exit 7" $s; done; echo started; while :; do sleep 0.05; done`
			p := startDlock(t, env, "run", uniqueName(t), "--", "sh", "-c", script)
			if l := p.line(); l != "started" {
				t.Fatalf("command printed %q, want started", l)
			}
			p.signal(sig)
			if code := p.wait(); code != 7 {
				t.Fatalf("dlock run exited %d, want the command's 7; stderr:\n%s", code, p.stderr.String())
			}
			want := "got " + strings.TrimPrefix(signalName(sig), "SIG")
			if got := p.stdout(); got != "started\n"+want {
				t.Errorf("stdout = %q, want started, %s", got, want)
			}
		})
	}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

func TestRunSignalWhileWaiting(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	holder := startDlock(t, env, "run", name, "--", "sh", "-c", holdScript)
	if l := holder.line(); !strings.HasPrefix(l, "started") {
		t.Fatalf("holder printed %q", l)
	}
	waiter := startDlock(t, env, "run", "--wait", "1h", "--verbose", name, "--", "echo", "ran")
	// The waiter is waiting once its signal handler is installed and it
	// asked the store; a signal before that kills it with the default
	// action, which gives the same exit code.
	waiter.signal(syscall.SIGTERM)
	if code := waiter.wait(); code != 128+int(syscall.SIGTERM) {
		t.Errorf("waiting dlock run exited %d after SIGTERM, want %d; stderr:\n%s", code, 128+int(syscall.SIGTERM), waiter.stderr.String())
	}
	if out := waiter.stdout(); out != "" {
		t.Errorf("waiting dlock run's command ran: %q", out)
	}
	holder.stdin.Close()
	if code := holder.wait(); code != 0 {
		t.Errorf("holder exited %d", code)
	}
}

// TestRunStoreUnreachableStopsTheCommand pauses the store (SIGSTOP) under
// a running command: renewals go unanswered, the lease runs out on dlock's
// clock, and the command is stopped before the store could give the lock
// to someone else.
func TestRunStoreUnreachableStopsTheCommand(t *testing.T) {
	srv := testredis.Start(t)
	p := startDlock(t, []string{"DLOCK_REDIS_URL=" + srv.URL()}, "run", "--ttl", "1s", "--grace", "5s", uniqueName(t), "--",
		"sh", "-c", `trap 'echo terminated; exit 0' TERM; echo started; while :; do sleep 0.05; done`)
	if l := p.line(); l != "started" {
		t.Fatalf("command printed %q, want started", l)
	}
	srv.Pause()
	defer srv.Resume()
	if code := p.wait(); code != runner.ExitLeaseLost {
		t.Fatalf("dlock run exited %d with the store paused, want %d; stderr:\n%s", code, runner.ExitLeaseLost, p.stderr.String())
	}
	if got := p.stdout(); got != "started\nterminated" {
		t.Errorf("stdout = %q, want the command terminated", got)
	}
}

func TestRunConflictExitCode(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	holder := startDlock(t, env, "run", name, "--", "sh", "-c", holdScript)
	if l := holder.line(); !strings.HasPrefix(l, "started") {
		t.Fatalf("holder printed %q", l)
	}
	tests := []struct {
		args   []string
		env    []string
		code   int
		stderr bool
	}{
		{[]string{"--conflict-exit-code", "3"}, nil, 3, true},
		{[]string{"--quiet", "--conflict-exit-code=0"}, nil, 0, false},
		{nil, []string{"DLOCK_QUIET=1", "DLOCK_CONFLICT_EXIT_CODE=0"}, 0, false},
	}
	for _, tt := range tests {
		args := append(append([]string{"run"}, tt.args...), name, "--", "echo", "ran")
		code, out, stderr := runDlock(t, append(env, tt.env...), args...)
		if code != tt.code || out != "" || (stderr != "") != tt.stderr {
			t.Errorf("dlock %q (env %q) on a held lock = %d, stdout %q, stderr %q; want %d, no output, stderr %v",
				args, tt.env, code, out, stderr, tt.code, tt.stderr)
		}
	}
	// The command's own exit code is passed through unchanged.
	holder.stdin.Close()
	holder.wait()
	if code, _, _ := runDlock(t, env, "run", "--conflict-exit-code", "0", name, "--", "sh", "-c", "exit 75"); code != 75 {
		t.Errorf("dlock run of a command exiting 75 = %d, want 75", code)
	}
}

// TestRunMaxHold: dlock run --max-hold stops a command that runs too long
// (exit 70, saying so) and frees the lock on Valkey; a bad value is a
// usage error.
func TestRunMaxHold(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	p := startDlock(t, env, "run", "--ttl", "1s", "--max-hold", "1500ms", "--grace", "300ms", name, "--",
		"sh", "-c", `trap '' TERM; echo started; exec sleep 1000`)
	if l := p.line(); l != "started" {
		t.Fatalf("command printed %q, want started", l)
	}
	if v, err := srv.Do("PTTL", "lock:"+name); err != nil {
		t.Errorf("PTTL lock:%s: %v", name, err)
	} else if ms, _ := strconv.Atoi(v); ms > 1500 {
		t.Errorf("PTTL lock:%s = %d, want at most the max hold 1500 (the acquire asks for min(TTL, max hold))", name, ms)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("dlock run --max-hold 1500ms still running after 60s")
	}
	if code := p.wait(); code != runner.ExitLeaseLost {
		t.Fatalf("dlock run --max-hold exited %d, want %d; stderr:\n%s", code, runner.ExitLeaseLost, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "max hold") {
		t.Errorf("stderr = %q, want it to say the max hold was reached", p.stderr.String())
	}
	if v, err := srv.Do("EXISTS", "lock:"+name); err != nil || v != "0" {
		t.Errorf("EXISTS lock:%s after dlock run exited = %q, %v; want 0 (released)", name, v, err)
	}
	for _, bad := range []string{"5ms", "-1s", "9000h"} {
		if code, _, stderr := runDlock(t, env, "run", "--max-hold", bad, name, "--", "true"); code != runner.ExitUsage || !strings.Contains(stderr, "--max-hold") {
			t.Errorf("dlock run --max-hold %s exited %d (stderr %q), want %d naming --max-hold", bad, code, stderr, runner.ExitUsage)
		}
	}
}
