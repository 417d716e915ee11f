package testproc_test

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/internal/testproc"
)

// listener returns the spec of a real server (python3's http.server) on
// port, ready once it accepts a connection.
func listener(t *testing.T, dir string, port int) testproc.Spec {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	return testproc.Spec{
		Name: "http.server",
		Argv: []string{"python3", "-u", "-m", "http.server", "--bind", "127.0.0.1", strconv.Itoa(port)},
		Dir:  dir,
		Log:  filepath.Join(dir, "server.log"),
		Ready: func(int) error {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			return c.Close()
		},
	}
}

func TestStartKillRestartStop(t *testing.T) {
	if _, err := testproc.LookPath("python3"); err != nil {
		testproc.Missing(t, err, "apt-get install -y python3")
	}
	dir := t.TempDir()
	p, ports, err := testproc.Launch(1, func(ports []int) (testproc.Spec, error) {
		return listener(t, dir, ports[0]), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	first := p.PID()
	if first == 0 || !p.Running() {
		t.Fatalf("after Launch: PID %d, Running %v", first, p.Running())
	}
	p.Kill()
	if p.PID() != 0 || p.Running() {
		t.Fatalf("after Kill: PID %d, Running %v", p.PID(), p.Running())
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the port still accepts after Kill")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if p.PID() == 0 || p.PID() == first {
		t.Fatalf("after Restart: PID %d (was %d)", p.PID(), first)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("after Restart, same port: %v", err)
	}
	c.Close()
	p.Stop()
	if p.Running() {
		t.Fatal("Running after Stop")
	}
}

func TestNotReadyQuotesTheLog(t *testing.T) {
	dir := t.TempDir()
	p := testproc.New(testproc.Spec{
		Name:  "sh",
		Argv:  []string{"sh", "-c", "echo the last words; exec sleep 60"},
		Log:   filepath.Join(dir, "sh.log"),
		Ready: func(int) error { return errors.New("never") },
		// A short deadline: what is tested is that it is kept, and how
		// the failure reads.
		ReadyTimeout: 200e6,
	})
	err := p.Start()
	if err == nil || !strings.Contains(err.Error(), "the last words") || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("Start = %v, want a not-ready error quoting the log", err)
	}
	if p.Running() {
		t.Fatal("a process that was not ready is still running")
	}
	p2 := testproc.New(testproc.Spec{Name: "false", Argv: []string{"sh", "-c", "echo bad config; exit 3"}, Log: filepath.Join(dir, "f.log"),
		Ready: func(int) error { return fmt.Errorf("no") }})
	if err := p2.Start(); err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "bad config") {
		t.Fatalf("Start of a process that exits = %v, want an exited error quoting the log", err)
	}
}
