// Package etcdtest starts real etcd servers (Debian's etcd-server package)
// on free loopback ports for tests, and stops them by PID when the test ends.
//
// Each server is a one-member cluster with its data in t.TempDir(), client
// and peer URLs on 127.0.0.1 only, and a short heartbeat (10ms) and election
// timeout (100ms), which also brings etcd's minimum lease TTL down to one
// second. On Linux the server is killed when the test binary dies.
//
// When the etcd binary is missing, [Start] skips the test, or fails it when
// the environment variable CI is true. scripts/test.sh installs Debian's
// etcd-server package.
package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	readyTimeout  = 30 * time.Second
	stopTimeout   = 10 * time.Second
	startAttempts = 5
)

// Path returns the path of the etcd binary: the one in PATH, else
// /usr/bin/etcd or /usr/local/bin/etcd.
func Path() (string, error) {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/etcd", "/usr/local/bin/etcd"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("etcdtest: etcd not found in PATH, /usr/bin or /usr/local/bin")
}

// Require returns the etcd path, or skips tb (fails it under CI=true).
func Require(tb testing.TB) string {
	tb.Helper()
	p, err := Path()
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%v; install it with `apt-get install -y etcd-server` or run scripts/test.sh", err)
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		tb.Fatalf("%s (CI=true: a missing server is a failure, not a skip)", msg)
	}
	tb.Skipf("%s (skipping; with CI=true this would fail)", msg)
	return ""
}

// A Server is an etcd process started by [Start]. Its ports and data stay
// the same across [Server.Restart].
type Server struct {
	path       string
	dir        string
	clientPort int
	peerPort   int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts a one-member etcd cluster on free ports of 127.0.0.1 and
// returns once it answers /health. A t.Cleanup kills it by PID. It skips
// the test when etcd is missing (fails it if CI=true) and fails the test,
// quoting the server's log, when it does not start.
func Start(tb testing.TB) *Server {
	tb.Helper()
	path := Require(tb)
	s := &Server{path: path, dir: tb.TempDir()}
	tb.Cleanup(s.Kill)
	var last error
	for range startAttempts {
		var err error
		if s.clientPort, err = freePort(); err == nil {
			s.peerPort, err = freePort()
		}
		if err != nil {
			tb.Fatalf("etcdtest: %v", err)
		}
		os.RemoveAll(filepath.Join(s.dir, "data"))
		s.mu.Lock()
		err = s.launch()
		s.mu.Unlock()
		if err == nil {
			return s
		}
		last = err
	}
	tb.Fatalf("etcdtest: start etcd: %v", last)
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
	logPath := filepath.Join(s.dir, "etcd.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.peerPort))
	cmd := exec.Command(s.path,
		"--name", "dlock",
		"--data-dir", filepath.Join(s.dir, "data"),
		"--listen-client-urls", s.URL(),
		"--advertise-client-urls", s.URL(),
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "dlock="+peer,
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
		"--logger", "zap",
		"--log-level", "warn",
	)
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
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("etcd exited:\n%s", s.logTail())
		default:
		}
		if resp, err := client.Get(s.URL() + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.killLocked()
	return fmt.Errorf("etcd not ready after %v:\n%s", readyTimeout, s.logTail())
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "etcd.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Endpoint returns the client address, host:port.
func (s *Server) Endpoint() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.clientPort))
}

// DataDir returns the server's data directory (etcd's --data-dir). Copy or
// replace it only while the server is stopped ([Server.Kill]); a
// [Server.Restart] then starts from what it holds, as from a backup.
func (s *Server) DataDir() string { return filepath.Join(s.dir, "data") }

// URL returns the client URL, http://host:port.
func (s *Server) URL() string { return "http://" + s.Endpoint() }

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

// Pause stops the server with SIGSTOP; Resume continues it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// Restart kills the server and starts it again on the same ports with the
// same data (etcd keeps every acknowledged write). It fails tb when the
// server does not come back.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	var err error
	deadline := time.Now().Add(readyTimeout)
	for {
		if err = s.launch(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("etcdtest: restart etcd: %v", err)
}
