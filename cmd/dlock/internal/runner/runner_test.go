//go:build unix

package runner

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness runs Run in a goroutine on a memory store, with the command's
// stdout on a pipe the test reads line by line.
type harness struct {
	t      *testing.T
	store  *memory.Store
	locker *dlock.Locker
	sigs   chan os.Signal
	lines  chan string
	stdinW io.WriteCloser
	done   chan result
}

type result struct {
	code int
	err  error
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	st := memory.New()
	l, err := dlock.New(st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &harness{t: t, store: st, locker: l}
}

func (h *harness) start(cfg Config) {
	h.t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		h.t.Fatal(err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		h.t.Fatal(err)
	}
	h.stdinW = inW
	h.sigs = make(chan os.Signal, 1)
	h.lines = make(chan string, 100)
	h.done = make(chan result, 1)
	cfg.Locker = h.locker
	cfg.Stdin, cfg.Stdout, cfg.Stderr = inR, outW, io.Discard
	cfg.Signals = h.sigs
	cfg.Env = []string{"PATH=" + os.Getenv("PATH")}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	go func() {
		code, err := Run(context.Background(), cfg)
		inR.Close()
		outW.Close()
		<-readDone
		outR.Close()
		h.done <- result{code, err}
	}()
	h.t.Cleanup(func() { inW.Close() })
}

func (h *harness) line() string {
	h.t.Helper()
	select {
	case l := <-h.lines:
		return l
	case r := <-h.done:
		h.done <- r
		h.t.Fatalf("Run returned %d, %v before the command printed a line", r.code, r.err)
	}
	return ""
}

func (h *harness) wait() result {
	r := <-h.done
	h.done <- r
	return r
}

func TestRunReleasesAndPassesExitCode(t *testing.T) {
	h := newHarness(t)
	h.start(Config{Name: "job", TTL: time.Second, Command: []string{"sh", "-c", `echo "$DLOCK_NAME $DLOCK_FENCE"; exit 5`}})
	f := strings.Fields(h.line())
	if len(f) != 2 || f[0] != "job" {
		t.Fatalf("command printed %q", f)
	}
	if r := h.wait(); r.code != 5 || r.err != nil {
		t.Errorf("Run = %d, %v; want 5, nil", r.code, r.err)
	}
	if st, _ := h.store.State(context.Background(), "job"); st.Holders != 0 {
		t.Errorf("lock still held after Run: %+v", st)
	}
}

func TestRunLockedAndWait(t *testing.T) {
	h := newHarness(t)
	other, err := h.locker.Mutex("job").TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	code, err := Run(context.Background(), Config{Locker: h.locker, Name: "job", TTL: time.Second, Command: []string{"true"}})
	if code != ExitLocked || err == nil || !strings.Contains(err.Error(), "held") {
		t.Errorf("Run on a held lock = %d, %v; want %d", code, err, ExitLocked)
	}
	// Waiting: the run starts once the other holder releases.
	h.start(Config{Name: "job", TTL: time.Second, Wait: time.Hour, Command: []string{"sh", "-c", "echo ran"}})
	other.Release(context.Background())
	if l := h.line(); l != "ran" {
		t.Errorf("command printed %q, want ran", l)
	}
	if r := h.wait(); r.code != 0 {
		t.Errorf("Run = %d, %v; want 0", r.code, r.err)
	}
}

func TestRunLeaseLost(t *testing.T) {
	h := newHarness(t)
	h.start(Config{Name: "job", TTL: 300 * time.Millisecond, Grace: 200 * time.Millisecond,
		Command: []string{"sh", "-c", `trap '' TERM; echo "$DLOCK_TOKEN"; exec sleep 1000`}})
	token := h.line()
	// Someone else frees the lock: the next renewal is refused.
	if err := h.store.Release(context.Background(), dlock.Request{Name: "job", Token: token}); err != nil {
		t.Fatal(err)
	}
	r := h.wait()
	if r.code != ExitLeaseLost || r.err == nil || !strings.Contains(r.err.Error(), "lease") {
		t.Errorf("Run after lease loss = %d, %v; want %d", r.code, r.err, ExitLeaseLost)
	}
}

func TestRunForwardsSignal(t *testing.T) {
	h := newHarness(t)
	h.start(Config{Name: "job", TTL: time.Second,
		Command: []string{"sh", "-c", `trap 'echo usr1; exit 9' USR1; echo started; while :; do sleep 0.05; done`}})
	if l := h.line(); l != "started" {
		t.Fatalf("command printed %q", l)
	}
	h.sigs <- syscall.SIGUSR1
	if l := h.line(); l != "usr1" {
		t.Errorf("command printed %q, want usr1", l)
	}
	if r := h.wait(); r.code != 9 {
		t.Errorf("Run = %d, %v; want 9", r.code, r.err)
	}
}

func TestRunSignalWhileAcquiring(t *testing.T) {
	h := newHarness(t)
	if _, err := h.locker.Mutex("job").TryLock(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.start(Config{Name: "job", TTL: time.Second, Wait: time.Hour, Command: []string{"echo", "ran"}})
	h.sigs <- syscall.SIGINT
	if r := h.wait(); r.code != 128+int(syscall.SIGINT) {
		t.Errorf("Run = %d, %v; want %d", r.code, r.err, 128+int(syscall.SIGINT))
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{&dlock.LockedError{Name: "x", RetryAfter: time.Second}, ExitLocked},
		{errors.Join(&dlock.LockedError{Name: "x"}, context.DeadlineExceeded), ExitLocked},
		{&dlock.StoreError{Op: "acquire", Node: -1, Err: errors.New("refused")}, ExitUnavailable},
		{dlock.ErrNoQuorum, ExitUnavailable},
		{dlock.ErrLeaseLost, ExitLeaseLost},
		{dlock.ErrNotHeld, ExitLeaseLost},
		{&dlock.InvalidError{Field: "ttl", Reason: "bad"}, ExitUsage},
		{errors.New("other"), ExitFailure},
	}
	for _, tt := range tests {
		if got, _ := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestChildEnv(t *testing.T) {
	h := newHarness(t)
	ls, err := h.locker.Mutex("job").TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	env := childEnv([]string{"A=1", "DLOCK_FENCE=old", "DLOCK_TOKEN=old", "DLOCK_NAME=old", "B=2"}, ls, false)
	want := []string{"A=1", "B=2", "DLOCK_NAME=job", "DLOCK_FENCE=", "DLOCK_TOKEN=" + ls.Token()}
	if len(env) != len(want) {
		t.Fatalf("childEnv = %q, want %q", env, want)
	}
	for i := range want {
		if !strings.HasPrefix(env[i], want[i]) {
			t.Errorf("childEnv[%d] = %q, want %q...", i, env[i], want[i])
		}
	}
}

// TestRunMaxHold: a command that outlives --max-hold is stopped as on a
// lost lease, the error says why, and the lock is free afterwards.
func TestRunMaxHold(t *testing.T) {
	h := newHarness(t)
	h.start(Config{Name: "job", TTL: 300 * time.Millisecond, MaxHold: time.Second, Grace: 200 * time.Millisecond,
		Command: []string{"sh", "-c", `trap '' TERM; echo started; exec sleep 1000`}})
	if l := h.line(); l != "started" {
		t.Fatalf("command printed %q, want started", l)
	}
	var r result
	select {
	case r = <-h.done:
	case <-time.After(60 * time.Second):
		t.Fatal("command still running 60s after a max hold of 1s")
	}
	if r.code != ExitLeaseLost || r.err == nil || !strings.Contains(r.err.Error(), "max hold") {
		t.Errorf("Run past its max hold = %d, %v; want %d saying max hold", r.code, r.err, ExitLeaseLost)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := h.store.State(context.Background(), "job")
		if st.Holders == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock still held 10s after the max hold: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
