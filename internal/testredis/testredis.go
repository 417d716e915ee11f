// Package testredis starts real redis-server processes on free loopback ports
// for tests, and stops them when the test ends.
//
// Every server gets its own directory from t.TempDir, listens on 127.0.0.1
// only, and is killed by PID in a t.Cleanup registered before it starts, so a
// failing test leaks no process. On Linux the server is also killed when the
// test binary dies (for example on a -timeout panic, which skips cleanups).
// Its stdout and stderr go to redis.log in its directory; failure messages
// quote the tail of that file.
//
// When redis-server is not installed, [Start] skips the test, or fails it when
// the environment variable CI is true: in CI a missing server is a failure,
// never a skip. scripts/test.sh installs Debian's redis-server.
//
// [WithClockShim] lets a test step a server's wall clock ([Server.StepClock]).
//
// Functions that take a testing.TB call its Fatal and Skip methods, so they
// must be called from the goroutine running the test. The methods of
// [Server] that take no testing.TB are safe for concurrent use.
package testredis

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// readyTimeout bounds one attempt to start a server and see it answer.
	readyTimeout = 20 * time.Second
	// stopTimeout is how long Stop waits after SIGTERM before it sends SIGKILL.
	stopTimeout = 10 * time.Second
	// restartTimeout bounds Restart's retries while the old port is still taken.
	restartTimeout = 30 * time.Second
	// startAttempts is how many fresh ports Start tries before it gives up.
	startAttempts = 10
)

// errPortInUse reports that redis-server could not bind its port.
var errPortInUse = errors.New("testredis: port in use")

// Path returns the path of the redis-server binary: the one found in PATH,
// else the first of /usr/bin, /usr/sbin and /usr/local/bin that has one.
// It returns an error when there is none.
func Path() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, "redis-server")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("testredis: redis-server not found in PATH, /usr/bin, /usr/sbin or /usr/local/bin")
}

// requireBinary returns the redis-server path, or skips tb (fails it under CI=true).
func requireBinary(tb testing.TB) string {
	tb.Helper()
	p, err := Path()
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%v; install it with `apt-get install -y redis-server` or run scripts/test.sh", err)
	if inCI() {
		tb.Fatalf("%s (CI=true: a missing redis-server is a failure, not a skip)", msg)
	}
	tb.Skipf("%s (skipping; with CI=true this would fail)", msg)
	return ""
}

func inCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// An Option configures a server started by [Start].
type Option func(*options)

type options struct {
	persistence bool
	cluster     bool
	clockShim   bool
	args        []string
	// sentinelConf, when set, makes the process a Sentinel (sentinel.go)
	// reading and rewriting this config file.
	sentinelConf string
}

// WithPersistence turns on the append-only file with appendfsync always, so
// every acknowledged write survives [Server.Kill] and [Server.Restart].
// By default the server persists nothing (save "" and appendonly no).
func WithPersistence() Option {
	return func(o *options) { o.persistence = true }
}

// WithArgs appends redis-server command-line arguments, such as
// WithArgs("--maxmemory-policy", "allkeys-lru"). They come after the
// defaults, so for single-valued directives they override them.
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// WithCluster starts the server with cluster-enabled yes, its
// cluster-config-file (nodes.conf) in its directory, and a cluster bus on a
// second free port. A lone cluster node serves nothing until it is joined
// with others and assigned slots; [StartCluster] does that.
func WithCluster() Option {
	return func(o *options) { o.cluster = true }
}

// A Server is a redis-server process started by [Start]. Its address, port
// and directory stay the same across [Server.Restart].
type Server struct {
	path    string
	dir     string
	logPath string
	port    int
	busPort int // cluster bus port, 0 unless WithCluster
	opts    options
	clock   *clock // the wall clock's shim, nil unless WithClockShim

	mu     sync.Mutex // serialises Kill, Stop, Restart, Pause and Resume
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
}

// Start starts a redis-server on a free port of 127.0.0.1 and returns once it
// answers PING. Unless opts say otherwise it runs with
//
//	--port N --bind 127.0.0.1 --dir <t.TempDir()> --save "" --appendonly no
//	--repl-diskless-sync no --repl-diskless-sync-delay 0
//	--enable-debug-command local
//
// (no persistence; DEBUG allowed from loopback; replicas sync through a file
// in the directory: with Redis 7.0's diskless sync a new replica reports its
// link up, and WAIT counts it, up to a second before the primary streams
// writes to it).
// A t.Cleanup kills it by PID when the test ends. Start retries on a fresh
// port when another process takes the chosen one first. It skips the test
// when redis-server is missing (fails it if CI=true), and fails the test,
// quoting the server's log, when the server does not start.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	path := requireBinary(tb)
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dir := tb.TempDir()
	s := &Server{path: path, dir: dir, logPath: filepath.Join(dir, "redis.log"), opts: o}
	// Registered after TempDir, so it runs before the directory is removed.
	tb.Cleanup(s.Kill)
	if o.clockShim {
		s.clock = newClock(tb, dir)
	}

	var last error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("testredis: %v", err)
		}
		bus := 0
		if o.cluster {
			if bus, err = freePort(); err != nil {
				tb.Fatalf("testredis: %v", err)
			}
		}
		s.port, s.busPort = port, bus
		s.mu.Lock()
		err = s.launch()
		s.mu.Unlock()
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortInUse) {
			tb.Fatalf("testredis: start redis-server on %s: %v", s.Addr(), err)
		}
		last = err
	}
	tb.Fatalf("testredis: start redis-server: no free port after %d attempts: %v", startAttempts, last)
	return nil
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

func (s *Server) argv() []string {
	if s.opts.sentinelConf != "" {
		return s.sentinelArgv()
	}
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--save", "",
		"--repl-diskless-sync", "no",
		"--repl-diskless-sync-delay", "0",
		"--enable-debug-command", "local",
	}
	if s.opts.persistence {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if s.opts.cluster {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(s.busPort),
		)
	}
	return append(a, s.opts.args...)
}

// launch starts the process and waits until it is ready. s.mu must be held.
// On failure the process is gone; the error wraps errPortInUse when the
// server could not bind its port.
func (s *Server) launch() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	offset, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return err
	}
	fmt.Fprintf(logf, "=== testredis: %s %s\n", s.path, strings.Join(s.argv(), " "))
	cmd := exec.Command(s.path, s.argv()...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if s.clock != nil {
		cmd.Env = s.clock.env()
	}
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logf.Close() // the child holds its own descriptor
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited

	err = s.waitReady(cmd.Process.Pid, exited)
	if err == nil {
		return nil
	}
	s.kill()
	since := s.logSince(offset)
	if bytes.Contains(since, []byte("Address already in use")) {
		return fmt.Errorf("%w: %v", errPortInUse, err)
	}
	return fmt.Errorf("%v\n%s", err, s.tail(since))
}

// waitReady waits until the server at s.Addr() is the process pid and
// answers PING with PONG (not LOADING).
func (s *Server) waitReady(pid int, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited before it was ready: %v", s.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server not ready after %v: %v", readyTimeout, last)
		}
		last = s.checkReady(pid)
		if last == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) checkReady(pid int) error {
	// Another process may have taken the port between freePort and the
	// server's bind; only trust an answer from our own process.
	info, err := s.DoTimeout(time.Second, "INFO", "server")
	if err != nil {
		return err
	}
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is served by process %s, not %d", s.Addr(), got, pid)
	}
	pong, err := s.DoTimeout(time.Second, "PING")
	if err != nil {
		return err
	}
	if pong != "PONG" {
		return fmt.Errorf("PING = %q, want PONG", pong)
	}
	return nil
}

// infoField returns the value of field in the reply of INFO or CLUSTER INFO.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

func (s *Server) logSince(offset int64) []byte {
	b, err := os.ReadFile(s.logPath)
	if err != nil || offset > int64(len(b)) {
		return nil
	}
	return b[offset:]
}

// tail renders the last lines of log for a failure message.
func (s *Server) tail(log []byte) string {
	const maxLines = 30
	lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return fmt.Sprintf("--- last lines of %s ---\n%s\n---", s.logPath, strings.Join(lines, "\n"))
}

// LogTail returns the last lines of the server's log (its stdout and stderr
// across restarts), for failure messages.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(s.logPath)
	return s.tail(b)
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns the server's URL, "redis://127.0.0.1:port".
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory, which holds its log, its
// append-only files and, for a cluster node, nodes.conf.
func (s *Server) Dir() string { return s.dir }

// PID returns the process ID of the current redis-server process, which
// changes on [Server.Restart]. After Kill or Stop it is the ID the process had.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// running reports whether the process is still alive. s.mu must be held.
func (s *Server) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the server and waits until it has exited. Unsaved
// data is lost. It does nothing when the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

func (s *Server) kill() {
	if !s.running() {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// Stop sends SIGTERM to the server (and SIGCONT, should it be paused) and
// waits until it has exited, for a clean shutdown. After 10 seconds it kills
// it. It does nothing when the server is not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		s.kill()
	}
}

// Pause sends SIGSTOP to the server: it keeps its connections and port but
// answers nothing until [Server.Resume]. On Linux Pause returns once the
// process is stopped. It does nothing when the server is not running.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return
	}
	s.cmd.Process.Signal(syscall.SIGSTOP)
	waitState(s.cmd.Process.Pid, true)
}

// Resume sends SIGCONT to a server stopped by [Server.Pause]. It does nothing
// when the server is not running.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT)
	waitState(s.cmd.Process.Pid, false)
}

// Restart kills the server if it is running and starts it again on the same
// port, with the same options and directory, and waits until it answers PING.
// Without [WithPersistence] the data is gone; with it every acknowledged
// write is back. A cluster node keeps its identity and slots (nodes.conf).
// While the old port is not yet reusable Restart retries, for up to 30
// seconds; then it fails tb, quoting the server's log.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
	deadline := time.Now().Add(restartTimeout)
	for {
		err := s.launch()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortInUse) {
			tb.Fatalf("testredis: restart redis-server on %s: %v", s.Addr(), err)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testredis: restart redis-server on %s: port still taken after %v: %v\n%s",
				s.Addr(), restartTimeout, err, s.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
