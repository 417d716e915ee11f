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
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testproc"
)

const readyTimeout = 60 * time.Second

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
	if err != nil {
		testproc.Missing(tb, err, "apt-get install -y zookeeper")
	}
	return java, jar
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
	dir  string
	port int
	sync bool
	proc *testproc.Proc
}

// Start starts a standalone ZooKeeper on a free port of 127.0.0.1 and
// returns once it serves requests. A t.Cleanup stops it by PID.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	java, jar := Require(tb)
	s := &Server{dir: tb.TempDir()}
	for _, o := range opts {
		o(s)
	}
	proc, ports, err := testproc.Launch(1, func(ports []int) (testproc.Spec, error) {
		s.port = ports[0]
		return s.spec(java, jar)
	})
	if err != nil {
		tb.Fatalf("zktest: start zookeeper: %v", err)
	}
	s.port, s.proc = ports[0], proc
	tb.Cleanup(proc.Stop)
	return s
}

func (s *Server) spec(java, jar string) (testproc.Spec, error) {
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
`, s.DataDir(), s.port, map[bool]string{false: "no", true: "yes"}[s.sync])
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return testproc.Spec{}, err
	}
	return testproc.Spec{
		Name: "zookeeper",
		Argv: []string{java,
			"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
			"-Dzookeeper.admin.enableServer=false",
			"-cp", jar, "org.apache.zookeeper.server.ZooKeeperServerMain", cfg},
		Log:          filepath.Join(s.dir, "zookeeper.log"),
		ReadyTimeout: readyTimeout,
		Ready:        func(int) error { return s.serving() },
	}, nil
}

// serving reports nil once the server serves requests: "srvr" answers
// with its mode only then ("ruok" answers imok earlier, while it still
// loads).
func (s *Server) serving() error {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return err
	}
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), "Mode: ") {
		return errors.New("srvr: no mode yet")
	}
	return nil
}

// LogTail returns the last few kilobytes of the server's log.
func (s *Server) LogTail() string { return s.proc.LogTail() }

// DataDir returns the server's data directory (dataDir: snapshots and
// transaction log). Copy or replace it only while the server is stopped
// ([Server.Kill]); a [Server.Restart] then starts from what it holds, as
// from a backup.
func (s *Server) DataDir() string { return filepath.Join(s.dir, "data") }

// Addr returns host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// PID returns the server's process ID, or 0 when it is not running.
func (s *Server) PID() int { return s.proc.PID() }

// Kill sends SIGKILL to the server and waits for it to exit.
func (s *Server) Kill() { s.proc.Kill() }

// Restart kills the server and starts it again on the same port with the
// same data. It fails tb when the server does not come back.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	start := time.Now()
	if err := s.proc.Restart(); err != nil {
		tb.Fatalf("zktest: restart zookeeper: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		tb.Logf("zktest: restart took %v; log:\n%s", d, s.LogTail())
	}
}
