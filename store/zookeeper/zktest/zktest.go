// Package zktest starts real ZooKeeper servers (Debian's zookeeper
// package, run as a standalone ZooKeeperServerMain on the JVM) on free
// loopback ports for tests, and stops them by PID when the test ends.
//
// Each server keeps its data in t.TempDir(), listens on 127.0.0.1 only,
// runs with tickTime 100ms and allows session timeouts from 200ms to 60s,
// with the admin server off and the "srvr" command on (for readiness). On
// Linux the server is killed when the test binary dies.
//
// When java or Debian's zookeeper.jar is missing, [Start] skips the test, or
// fails it when the environment variable CI is true. scripts/test.sh
// installs Debian's zookeeper package (which brings a JRE).
package zktest

import (
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
	readyTimeout  = 60 * time.Second
	startAttempts = 5
)

// JarPath is where Debian's zookeeper package installs the server jar (its
// manifest names its dependencies).
const JarPath = "/usr/share/java/zookeeper.jar"

// Paths returns the java binary and the ZooKeeper jar.
func Paths() (java, jar string, err error) {
	java, err = exec.LookPath("java")
	if err != nil {
		return "", "", errors.New("zktest: java not found in PATH")
	}
	if _, err := os.Stat(JarPath); err != nil {
		return "", "", fmt.Errorf("zktest: %s not found", JarPath)
	}
	return java, JarPath, nil
}

// Require returns the paths, or skips tb (fails it under CI=true).
func Require(tb testing.TB) (java, jar string) {
	tb.Helper()
	java, jar, err := Paths()
	if err == nil {
		return java, jar
	}
	msg := fmt.Sprintf("%v; install it with `apt-get install -y zookeeper` or run scripts/test.sh", err)
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		tb.Fatalf("%s (CI=true: a missing server is a failure, not a skip)", msg)
	}
	tb.Skipf("%s (skipping; with CI=true this would fail)", msg)
	return "", ""
}

// An Option configures a server started by [Start].
type Option func(*Server)

// WithSync makes the server fsync its transaction log before acknowledging
// (forceSync=yes, ZooKeeper's default), for measurements; tests run
// without.
func WithSync() Option { return func(s *Server) { s.sync = true } }

// A Server is a ZooKeeper process started by [Start]. Its port and data stay
// the same across [Server.Restart].
type Server struct {
	java, jar string
	dir       string
	port      int
	sync      bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts a standalone ZooKeeper on a free port of 127.0.0.1 and
// returns once it serves requests. A t.Cleanup kills it by PID.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	java, jar := Require(tb)
	s := &Server{java: java, jar: jar, dir: tb.TempDir()}
	for _, o := range opts {
		o(s)
	}
	tb.Cleanup(s.Kill)
	var last error
	for range startAttempts {
		var err error
		if s.port, err = freePort(); err != nil {
			tb.Fatalf("zktest: %v", err)
		}
		s.mu.Lock()
		err = s.launch()
		s.mu.Unlock()
		if err == nil {
			return s
		}
		last = err
	}
	tb.Fatalf("zktest: start zookeeper: %v", last)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

func (s *Server) launch() error {
	cfg := filepath.Join(s.dir, "zoo.cfg")
	conf := fmt.Sprintf(`tickTime=100
minSessionTimeout=200
maxSessionTimeout=60000
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr
forceSync=%s
`, filepath.Join(s.dir, "data"), s.port, map[bool]string{false: "no", true: "yes"}[s.sync])
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "zookeeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.java,
		"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-Dzookeeper.admin.enableServer=false",
		"-cp", s.jar, "org.apache.zookeeper.server.ZooKeeperServerMain", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("zookeeper exited:\n%s", s.logTail())
		default:
		}
		if s.serving() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.killLocked()
	return fmt.Errorf("zookeeper not ready after %v:\n%s", readyTimeout, s.logTail())
}

// serving reports whether the server serves requests: "srvr" answers with
// its mode only then ("ruok" answers imok earlier, while it still loads).
func (s *Server) serving() bool {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return false
	}
	b, _ := io.ReadAll(c)
	return strings.Contains(string(b), "Mode: ")
}

// LogTail returns the last few kilobytes of the server's log.
func (s *Server) LogTail() string { return s.logTail() }

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "zookeeper.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// DataDir returns the server's data directory (dataDir: snapshots and
// transaction log). Copy or replace it only while the server is stopped
// ([Server.Kill]); a [Server.Restart] then starts from what it holds, as
// from a backup.
func (s *Server) DataDir() string { return filepath.Join(s.dir, "data") }

// Addr returns host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// PID returns the server's process ID, or 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill sends SIGKILL to the server and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

// Restart kills the server and starts it again on the same port with the
// same data. It fails tb when the server does not come back.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	var err error
	start := time.Now()
	deadline := start.Add(readyTimeout)
	for {
		if err = s.launch(); err == nil {
			if d := time.Since(start); d > 10*time.Second {
				tb.Logf("zktest: restart took %v; log:\n%s", d, s.logTail())
			}
			return
		}
		tb.Logf("zktest: restart attempt failed: %v", err)
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("zktest: restart zookeeper: %v", err)
}
