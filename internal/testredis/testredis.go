// Package testredis starts real redis-server processes on free loopback ports
// for tests, and stops them when the test ends.
//
// Every server gets its own directory from t.TempDir, listens on 127.0.0.1
// only, and is stopped by PID (internal/testproc: SIGTERM, then SIGKILL) in a
// t.Cleanup; one that fails to start is killed at once, so a failing test
// leaks no process. On Linux the server is also killed when the test binary
// dies (for example on a -timeout panic, which skips cleanups).
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
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testproc"
)

// readyTimeout bounds one attempt to start a server and see it answer,
// and Restart's retries while the old port is still taken.
const readyTimeout = 20 * time.Second

// Path returns the path of the redis-server binary: the one found in PATH,
// else the first of /usr/bin, /usr/sbin and /usr/local/bin that has one.
// It returns an error when there is none.
func Path() (string, error) {
	p, err := testproc.LookPath("redis-server", "/usr/bin", "/usr/sbin", "/usr/local/bin")
	if err != nil {
		return "", errors.New("testredis: redis-server not found in PATH, /usr/bin, /usr/sbin or /usr/local/bin")
	}
	return p, nil
}

// requireBinary returns the redis-server path, or skips tb (fails it under CI=true).
func requireBinary(tb testing.TB) string {
	tb.Helper()
	p, err := Path()
	if err != nil {
		testproc.Missing(tb, err, "apt-get install -y redis-server")
	}
	return p
}

// An Option configures a server started by [Start].
type Option func(*options)

type options struct {
	persistence bool
	cluster     bool
	clockShim   bool
	callgrind   bool
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
	// valgrind is valgrind's path WithCallgrind, else "".
	valgrind string
	proc     *testproc.Proc
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
// A t.Cleanup stops it by PID when the test ends (SIGTERM, then SIGKILL).
// Start retries on fresh ports when the server does not come up on the
// chosen ones (another process may take a port first). It skips the test
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
	if o.clockShim {
		s.clock = newClock(tb, dir)
	}
	if o.callgrind {
		s.valgrind = requireCallgrind(tb)
	}
	nports := 1
	if o.cluster {
		nports = 2
	}
	proc, ports, err := testproc.Launch(nports, func(ports []int) (testproc.Spec, error) {
		s.port = ports[0]
		if o.cluster {
			s.busPort = ports[1]
		}
		return s.spec(), nil
	})
	if err != nil {
		tb.Fatalf("testredis: start redis-server: %v", err)
	}
	s.port, s.proc = ports[0], proc
	// Registered after TempDir, so it runs before the directory is removed.
	tb.Cleanup(proc.Stop)
	return s
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

// spec is how s's process runs on s.port.
func (s *Server) spec() testproc.Spec {
	var env []string
	if s.clock != nil {
		env = s.clock.env()
	}
	argv := append([]string{s.path}, s.argv()...)
	if s.valgrind != "" {
		argv = s.callgrindArgv(argv)
	}
	return testproc.Spec{
		Name:         "redis-server on " + s.Addr(),
		Argv:         argv,
		Env:          env,
		Dir:          s.dir,
		Log:          s.logPath,
		ReadyTimeout: readyTimeout,
		Ready:        s.checkReady,
	}
}

// checkReady reports nil once the server at s.Addr() is the process pid
// and answers PING with PONG (not LOADING).
func (s *Server) checkReady(pid int) error {
	// Another process may have taken the port between the pick and the
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
func (s *Server) PID() int { return s.proc.LastPID() }

// Kill sends SIGKILL to the server and waits until it has exited. Unsaved
// data is lost. It does nothing when the server is not running.
func (s *Server) Kill() { s.proc.Kill() }

// Stop sends SIGTERM to the server (and SIGCONT, should it be paused) and
// waits until it has exited, for a clean shutdown. After 10 seconds it kills
// it. It does nothing when the server is not running.
func (s *Server) Stop() { s.proc.Stop() }

// Pause sends SIGSTOP to the server: it keeps its connections and port but
// answers nothing until [Server.Resume]. On Linux Pause returns once the
// process is stopped. It does nothing when the server is not running.
func (s *Server) Pause() { s.proc.Pause() }

// Resume sends SIGCONT to a server stopped by [Server.Pause]. It does nothing
// when the server is not running.
func (s *Server) Resume() { s.proc.Resume() }

// Restart kills the server if it is running and starts it again on the same
// port, with the same options and directory, and waits until it answers PING.
// Without [WithPersistence] the data is gone; with it every acknowledged
// write is back. A cluster node keeps its identity and slots (nodes.conf).
// While the old port is not yet reusable Restart retries, for up to 20
// seconds; then it fails tb, quoting the server's log.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.proc.Restart(); err != nil {
		tb.Fatalf("testredis: restart redis-server on %s: %v", s.Addr(), err)
	}
}
