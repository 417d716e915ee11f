// Package pgtest starts real PostgreSQL servers (Debian's postgresql package)
// on free loopback ports for tests, and stops them by PID when the test ends.
//
// The first server of a test binary runs initdb once into a template cluster;
// every server then gets a copy of it in its own temporary directory, listens
// on 127.0.0.1 only, keeps its unix socket in that directory, and runs with
// fsync off (durable across Kill and Restart, not across an OS crash).
// PostgreSQL refuses to run as root: when the test runs as root,
// initdb and postgres run as the postgres user (the process credentials are
// switched directly, so the PID recorded is the server's own). On Linux the
// server is also killed when the test binary dies.
//
// When the PostgreSQL binaries are missing, [Start] skips the test, or fails
// it when the environment variable CI is true. scripts/test.sh installs
// Debian's postgresql package.
package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testproc"
)

const readyTimeout = 30 * time.Second

// BinDir returns the directory holding initdb and postgres: the newest
// /usr/lib/postgresql/N/bin, else the directory of initdb in PATH.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("pgtest: initdb and postgres not found in /usr/lib/postgresql/*/bin or PATH")
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func inCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Require returns the binary directory, or skips tb (fails it under CI=true).
func Require(tb testing.TB) string {
	tb.Helper()
	d, err := BinDir()
	if err == nil {
		return d
	}
	msg := fmt.Sprintf("%v; install it with `apt-get install -y postgresql` or run scripts/test.sh", err)
	if inCI() {
		tb.Fatalf("%s (CI=true: a missing server is a failure, not a skip)", msg)
	}
	tb.Skipf("%s (skipping; with CI=true this would fail)", msg)
	return ""
}

// An Option configures a server started by [Start].
type Option func(*Server)

// WithFsync runs the server with fsync on (PostgreSQL's default), for
// measurements; tests run with fsync off.
func WithFsync() Option { return func(s *Server) { s.fsync = true } }

// A Server is a postgres process started by [Start]. Its port and data
// directory stay the same across [Server.Restart].
type Server struct {
	bin   string
	dir   string // owned by the server's user; holds data/, the socket and the log
	port  int
	cred  *syscall.Credential
	fsync bool
	proc  *testproc.Proc
}

var (
	templateOnce sync.Once
	templateDir  string
	templateErr  error
)

// serverCred returns the credentials to run the server with: the postgres
// user's when running as root, else nil (the current user).
func serverCred() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// mkdir makes a fresh directory under the system temp dir that cred's user
// owns (t.TempDir's parents are private to root, so it cannot be used).
func mkdir(prefix string, cred *syscall.Credential) (string, error) {
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(d)
			return "", err
		}
	}
	return d, nil
}

func command(cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = testproc.SysProcAttr()
	cmd.SysProcAttr.Credential = cred
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	return cmd
}

// template runs initdb once per test binary. The directory is left behind
// in the temp dir until the binary's last server is gone; it is small.
func template(bin string, cred *syscall.Credential) (string, error) {
	templateOnce.Do(func() {
		d, err := mkdir("pgtest-template-", cred)
		if err != nil {
			templateErr = err
			return
		}
		data := filepath.Join(d, "data")
		cmd := command(cred, filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "--no-instructions")
		cmd.Dir = d
		out, err := cmd.CombinedOutput()
		if err != nil {
			os.RemoveAll(d)
			templateErr = fmt.Errorf("initdb: %v\n%s", err, out)
			return
		}
		templateDir = d
	})
	return templateDir, templateErr
}

// Cleanup removes the template cluster; call it from TestMain after m.Run.
func Cleanup() {
	if templateDir != "" {
		os.RemoveAll(templateDir)
	}
}

// Start starts a postgres server on a free port of 127.0.0.1 and returns once
// it accepts connections. A t.Cleanup stops it by PID and removes its
// directory. It skips the test when PostgreSQL is missing (fails it if
// CI=true) and fails the test, quoting the server's log, when it does not
// start.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	bin := Require(tb)
	cred, err := serverCred()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tmpl, err := template(bin, cred)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	dir, err := mkdir("pgtest-", cred)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	s := &Server{bin: bin, dir: dir, cred: cred}
	for _, o := range opts {
		o(s)
	}
	tb.Cleanup(func() {
		s.Stop()
		os.RemoveAll(dir)
	})
	cp := command(cred, "cp", "-a", filepath.Join(tmpl, "data"), filepath.Join(dir, "data"))
	if out, err := cp.CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: copy template cluster: %v\n%s", err, out)
	}
	s.start(tb, "postgres")
	return s
}

// start launches s on a free port, trying fresh ports, and fails tb
// (naming what it starts) when none works.
func (s *Server) start(tb testing.TB, what string) {
	tb.Helper()
	proc, ports, err := testproc.Launch(1, func(ports []int) (testproc.Spec, error) {
		s.port = ports[0]
		return s.spec(), nil
	})
	if err != nil {
		tb.Fatalf("pgtest: start %s: %v", what, err)
	}
	s.port, s.proc = ports[0], proc
}

// spec is how s's postgres runs on s.port.
func (s *Server) spec() testproc.Spec {
	args := []string{filepath.Join(s.bin, "postgres"),
		"-D", filepath.Join(s.dir, "data"),
		"-k", s.dir,
		"-h", "127.0.0.1",
		"-p", strconv.Itoa(s.port),
		"-c", "max_connections=200",
		"-c", "log_min_messages=warning",
	}
	if !s.fsync {
		// fsync off: a killed server loses nothing written to the kernel,
		// only an OS crash would. (synchronous_commit stays on: with it
		// off, SIGKILL loses the last commits still in WAL buffers.)
		args = append(args, "-F", "-c", "full_page_writes=off")
	}
	return testproc.Spec{
		Name:         "postgres on port " + strconv.Itoa(s.port),
		Argv:         args,
		Env:          []string{"LC_ALL=C.UTF-8"},
		Log:          filepath.Join(s.dir, "postgres.log"),
		Cred:         s.cred,
		ReadyTimeout: readyTimeout,
		Ready: func(int) error {
			if !s.ready() {
				return errors.New("not accepting connections yet")
			}
			return nil
		},
		// SIGINT: fast shutdown, clients disconnected.
		StopSignal: syscall.SIGINT,
		// Backends of a killed postmaster exit on their own once they
		// notice; kill them too (by PID) and wait, so that a restart
		// finds the shared memory free.
		KillChildren: true,
	}
}

// ready reports whether the server answers the startup handshake: a
// connection with trust auth gets AuthenticationOk ('R') and then, once the
// server accepts connections, ReadyForQuery ('Z'); while it starts up it
// answers with an error ('E').
func (s *Server) ready() bool {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var msg bytes.Buffer
	params := "user\x00postgres\x00database\x00postgres\x00\x00"
	msg.Write(be32(uint32(8 + len(params))))
	msg.Write(be32(196608)) // protocol 3.0
	msg.WriteString(params)
	if _, err := c.Write(msg.Bytes()); err != nil {
		return false
	}
	buf := make([]byte, 4096)
	var got []byte
	for len(got) < 64*1024 {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		// Walk the complete messages received so far.
		for p := 0; p+5 <= len(got); {
			typ := got[p]
			l := int(uint32(got[p+1])<<24 | uint32(got[p+2])<<16 | uint32(got[p+3])<<8 | uint32(got[p+4]))
			if typ == 'E' {
				return false
			}
			if typ == 'Z' {
				c.Write([]byte{'X', 0, 0, 0, 4})
				return true
			}
			p += 1 + l
		}
		if err != nil {
			return false
		}
	}
	return false
}

func be32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

// Addr returns host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// URL returns a connection URL for the postgres database as the postgres
// superuser (trust authentication, no TLS).
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", s.Addr())
}

// PID returns the server's process ID, or 0 when it is not running.
func (s *Server) PID() int { return s.proc.PID() }

// Kill sends SIGKILL to the server (by PID), and to its backends, and
// waits for them to exit.
func (s *Server) Kill() { s.proc.Kill() }

// Stop shuts the server down (SIGINT: fast shutdown, clients disconnected)
// and waits for it, killing it after a timeout.
func (s *Server) Stop() { s.proc.Stop() }

// Restart stops the server if it runs and starts it again on the same port
// with the same data. It fails tb when the server does not come back.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.proc.Restart(); err != nil {
		tb.Fatalf("pgtest: restart postgres: %v", err)
	}
}

// StartStandby makes a streaming standby of primary (pg_basebackup -R -X
// stream: asynchronous, hot standby) on a free port of 127.0.0.1 and returns
// once it accepts connections. Like [Start], a t.Cleanup stops it by PID and
// removes its directory. Its postgresql.auto.conf holds primary_conninfo;
// promote it with pg_promote().
func StartStandby(tb testing.TB, primary *Server) *Server {
	tb.Helper()
	cred, err := serverCred()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	dir, err := mkdir("pgtest-standby-", cred)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	s := &Server{bin: primary.bin, dir: dir, cred: cred, fsync: primary.fsync}
	tb.Cleanup(func() {
		s.Stop()
		os.RemoveAll(dir)
	})
	bb := command(cred, filepath.Join(s.bin, "pg_basebackup"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
		"-D", filepath.Join(dir, "data"), "-R", "-X", "stream", "-c", "fast", "--no-sync")
	bb.Dir = dir
	if out, err := bb.CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	s.start(tb, "standby")
	return s
}
