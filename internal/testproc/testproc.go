// Package testproc starts a real server process for tests and stops it by
// PID: it picks free loopback ports, starts the process with its argv, env
// and directory, waits for it to be ready by a probe the caller supplies
// (with a deadline, never a fixed sleep), keeps its log for failure
// messages, and stops it with SIGTERM, then SIGKILL after a bound. A
// process can be killed with SIGKILL, paused, and started again with the
// same spec. On Linux the kernel kills it when the test binary dies.
//
// internal/testredis, store/etcd/etcdtest, store/postgres/pgtest and
// store/zookeeper/zktest build their servers on it.
package testproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A Spec says how to start one process and how to tell it is ready.
type Spec struct {
	Name string   // in messages: "etcd"
	Argv []string // the program and its arguments
	Env  []string // added to the test's environment
	Dir  string   // the working directory ("": the test's)
	// Log is the file the process's stdout and stderr are appended to.
	Log string
	// Ready reports nil once the process serves; it is polled until
	// ReadyTimeout. pid is the process's.
	Ready        func(pid int) error
	ReadyTimeout time.Duration // default 30s
	StopTimeout  time.Duration // SIGTERM to SIGKILL; default 10s
	// StopSignal is what Stop sends first (default SIGTERM).
	StopSignal syscall.Signal
	// Cred runs the process as another user (nil: as the test).
	Cred *syscall.Credential
	// KillChildren: Kill also kills the process's children (a server
	// that forks workers, which outlive a SIGKILL of their parent).
	KillChildren bool
}

// A Proc is a process started from a Spec; it may be started again.
type Proc struct {
	spec Spec

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	offset int64 // the log's size when the process last started
	last   int   // the PID of the process last started
}

const pollEvery = 20 * time.Millisecond

// New returns a Proc for spec, not started.
func New(spec Spec) *Proc {
	if spec.ReadyTimeout <= 0 {
		spec.ReadyTimeout = 30 * time.Second
	}
	if spec.StopTimeout <= 0 {
		spec.StopTimeout = 10 * time.Second
	}
	if spec.StopSignal == 0 {
		spec.StopSignal = syscall.SIGTERM
	}
	return &Proc{spec: spec}
}

// Start launches p and waits until its probe reports it ready. A process
// that exits or is not ready by the deadline is killed, and the error
// quotes its log.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked()
}

func (p *Proc) startLocked() error {
	if p.cmd != nil {
		return fmt.Errorf("%s: already running (pid %d)", p.spec.Name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) //nolint:gosec // G302: a test server's log, read by whoever debugs the run
	if err != nil {
		return err
	}
	defer logf.Close()
	if fi, err := logf.Stat(); err == nil {
		p.offset = fi.Size()
	}
	fmt.Fprintf(logf, "=== testproc: %s\n", strings.Join(p.spec.Argv, " "))
	cmd := exec.Command(p.spec.Argv[0], p.spec.Argv[1:]...) //nolint:gosec // G204: the test's own server command line
	cmd.Dir = p.spec.Dir
	if len(p.spec.Env) > 0 {
		cmd.Env = append(os.Environ(), p.spec.Env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = SysProcAttr()
	if p.spec.Cred != nil {
		cmd.SysProcAttr.Credential = p.spec.Cred
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.spec.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit is reported through exited and the log
		close(exited)
	}()
	p.cmd, p.exited, p.last = cmd, exited, cmd.Process.Pid
	return p.waitReadyLocked()
}

func (p *Proc) waitReadyLocked() error {
	pid, exited := p.cmd.Process.Pid, p.exited
	deadline := time.Now().Add(p.spec.ReadyTimeout)
	var err error
	for {
		select {
		case <-exited:
			p.cmd = nil
			return fmt.Errorf("%s exited before it was ready:\n%s", p.spec.Name, p.tail())
		default:
		}
		if p.spec.Ready == nil {
			return nil
		}
		if err = p.spec.Ready(pid); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-exited:
		case <-time.After(pollEvery):
		}
	}
	p.killLocked()
	return fmt.Errorf("%s not ready after %v (%v):\n%s", p.spec.Name, p.spec.ReadyTimeout, err, p.tail())
}

// Restart kills p (SIGKILL) and starts it again with the same spec,
// retrying until its ReadyTimeout (a port may linger after the kill).
func (p *Proc) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killLocked()
	deadline := time.Now().Add(p.spec.ReadyTimeout)
	for {
		err := p.startLocked()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // a retry's backoff, not a wait for an event
	}
}

// PID returns the process's ID, or 0 when it is not running.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// LastPID returns the ID of the process last started, running or not.
func (p *Proc) LastPID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Running reports whether the process was started and has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (to its children too, with KillChildren) and waits
// for the process to exit.
func (p *Proc) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killLocked()
}

func (p *Proc) killLocked() {
	if p.cmd == nil {
		return
	}
	var kids []int
	if p.spec.KillChildren {
		kids = children(p.cmd.Process.Pid)
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
	}
	<-p.exited
	p.cmd = nil
	deadline := time.Now().Add(p.spec.StopTimeout)
	for time.Now().Before(deadline) && anyAlive(kids) {
		time.Sleep(time.Millisecond)
	}
}

// Stop sends StopSignal (and SIGCONT, should it be paused), waits up to
// StopTimeout for the process to exit, then kills it. It is what a test's
// cleanup calls.
func (p *Proc) Stop() {
	if p == nil {
		return // never started: a cleanup of a start that failed first
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(p.spec.StopSignal)
	p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.exited:
		p.cmd = nil
	case <-time.After(p.spec.StopTimeout):
		p.killLocked()
	}
}

// Signal sends sig to the process, when it runs.
func (p *Proc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.cmd.Process.Signal(sig)
	}
}

// Pause stops the process with SIGSTOP and returns once it is stopped.
func (p *Proc) Pause() { p.pause(syscall.SIGSTOP, true) }

// Resume continues a paused process and returns once it runs.
func (p *Proc) Resume() { p.pause(syscall.SIGCONT, false) }

func (p *Proc) pause(sig syscall.Signal, stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(sig)
	waitState(p.cmd.Process.Pid, stopped)
}

// LogTail returns the last 4000 bytes of the log.
func (p *Proc) LogTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tail()
}

// LogSince returns what the process wrote to its log since it last
// started.
func (p *Proc) LogSince() []byte {
	p.mu.Lock()
	off := p.offset
	p.mu.Unlock()
	b, _ := os.ReadFile(p.spec.Log)
	if int64(len(b)) < off {
		return nil
	}
	return b[off:]
}

func (p *Proc) tail() string {
	b, _ := os.ReadFile(p.spec.Log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// FreePorts returns n distinct ports of 127.0.0.1 that were free a moment
// ago (another process may take one before the server binds it: start it
// with [Launch], which tries fresh ports).
func FreePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// Attempts is how many sets of fresh ports Launch tries.
const Attempts = 5

// Launch starts the process that build describes for nports free ports,
// trying fresh ports when one does not come up, and returns it with its
// ports.
func Launch(nports int, build func(ports []int) (Spec, error)) (*Proc, []int, error) {
	var last error
	for range Attempts {
		ports, err := FreePorts(nports)
		if err != nil {
			return nil, nil, err
		}
		spec, err := build(ports)
		if err != nil {
			return nil, nil, err
		}
		p := New(spec)
		if last = p.Start(); last == nil {
			return p, ports, nil
		}
	}
	return nil, nil, last
}

// InCI reports whether CI=true: a missing server then fails the test.
func InCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Missing skips tb because a server's binary is missing (err says which),
// or fails it under CI=true. install says how to get it.
func Missing(tb testing.TB, err error, install string) {
	tb.Helper()
	msg := fmt.Sprintf("%v; install it with `%s` or run scripts/test.sh", err, install)
	if InCI() {
		tb.Fatalf("%s (CI=true: a missing server is a failure, not a skip)", msg)
	}
	tb.Skipf("%s (skipping; with CI=true this would fail)", msg)
}

// LookPath finds an executable named name in PATH or else in dirs.
func LookPath(name string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		p := d + "/" + name
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(name + " not found in PATH or " + fmt.Sprint(dirs))
}
