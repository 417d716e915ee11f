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
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testproc"
)

const readyTimeout = 30 * time.Second

// Path returns the path of the etcd binary: the one in PATH, else
// /usr/bin/etcd or /usr/local/bin/etcd.
func Path() (string, error) {
	p, err := testproc.LookPath("etcd", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return "", errors.New("etcdtest: etcd not found in PATH, /usr/bin or /usr/local/bin")
	}
	return p, nil
}

// Require returns the etcd path, or skips tb (fails it under CI=true).
func Require(tb testing.TB) string {
	tb.Helper()
	p, err := Path()
	if err != nil {
		testproc.Missing(tb, err, "apt-get install -y etcd-server")
	}
	return p
}

// A Server is an etcd process started by [Start]. Its ports and data stay
// the same across [Server.Restart].
type Server struct {
	dir        string
	clientPort int
	proc       *testproc.Proc
}

// Start starts a one-member etcd cluster on free ports of 127.0.0.1 and
// returns once it answers /health. A t.Cleanup stops it by PID. It skips
// the test when etcd is missing (fails it if CI=true) and fails the test,
// quoting the server's log, when it does not start.
func Start(tb testing.TB) *Server {
	tb.Helper()
	path := Require(tb)
	s := &Server{dir: tb.TempDir()}
	proc, ports, err := testproc.Launch(2, func(ports []int) (testproc.Spec, error) {
		s.clientPort = ports[0]
		return s.spec(path, ports[1]), os.RemoveAll(s.DataDir())
	})
	if err != nil {
		tb.Fatalf("etcdtest: start etcd: %v", err)
	}
	s.clientPort, s.proc = ports[0], proc
	tb.Cleanup(proc.Stop)
	return s
}

func (s *Server) spec(path string, peerPort int) testproc.Spec {
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))
	url := s.URL()
	client := &http.Client{Timeout: time.Second}
	return testproc.Spec{
		Name: "etcd",
		Argv: []string{path,
			"--name", "dlock",
			"--data-dir", s.DataDir(),
			"--listen-client-urls", url,
			"--advertise-client-urls", url,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", "dlock=" + peer,
			"--heartbeat-interval", "10",
			"--election-timeout", "100",
			"--logger", "zap",
			"--log-level", "warn",
		},
		Log:          filepath.Join(s.dir, "etcd.log"),
		ReadyTimeout: readyTimeout,
		Ready: func(int) error {
			resp, err := client.Get(url + "/health")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/health: %s", resp.Status)
			}
			return nil
		},
	}
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
func (s *Server) PID() int { return s.proc.PID() }

// Kill sends SIGKILL to the server and waits for it to exit.
func (s *Server) Kill() { s.proc.Kill() }

// Pause stops the server with SIGSTOP; Resume continues it.
func (s *Server) Pause() { s.proc.Pause() }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.proc.Resume() }

// Restart kills the server and starts it again on the same ports with the
// same data (etcd keeps every acknowledged write). It fails tb when the
// server does not come back.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.proc.Restart(); err != nil {
		tb.Fatalf("etcdtest: restart etcd: %v", err)
	}
}
