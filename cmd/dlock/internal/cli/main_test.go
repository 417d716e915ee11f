//go:build unix

package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// dlockBin is the dlock binary built once for the end-to-end tests.
var dlockBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlock-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dlockBin = filepath.Join(dir, "dlock")
	build := exec.Command("go", "build", "-o", dlockBin, "github.com/dlock-dev/dlock/cmd/dlock")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dlock:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		// valkey-go's cluster client schedules a topology refresh on a
		// goroutine that sleeps first and is not stopped by Close: a
		// command that dialled an unreachable cluster node leaves one.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// baseEnv is the test's environment without DLOCK_* variables.
func baseEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLOCK_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// dlockProc is a running dlock binary. Its stdin is a pipe the test holds;
// its stdout lines arrive on lines.
type dlockProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	mu     sync.Mutex
	out    []string
	stderr lockedBuffer
	done   chan struct{}
	code   int
}

// startDlock starts dlock with args and env (on top of baseEnv). The
// process is killed at the end of the test if it is still running.
func startDlock(t *testing.T, env []string, args ...string) *dlockProc {
	t.Helper()
	p := &dlockProc{t: t, lines: make(chan string, 100), done: make(chan struct{})}
	p.cmd = exec.Command(dlockBin, args...)
	p.cmd.Env = baseEnv(env...)
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out = append(p.out, sc.Text())
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		<-read // all output read before Wait closes the pipe
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// runDlock runs dlock to completion and returns its exit code, stdout and
// stderr.
func runDlock(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	p := startDlock(t, env, args...)
	p.stdin.Close()
	code := p.wait()
	return code, p.stdout(), p.stderr.String()
}

// wait waits for the process to exit and returns its exit code.
func (p *dlockProc) wait() int {
	<-p.done
	return p.code
}

// line returns the next line of stdout.
func (p *dlockProc) line() string {
	p.t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-p.done:
		p.t.Fatalf("dlock exited %d before printing a line; stderr:\n%s", p.code, p.stderr.String())
	}
	return ""
}

func (p *dlockProc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.out, "\n")
}

func (p *dlockProc) signal(s os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatal(err)
	}
}

// exited reports whether the process has exited.
func (p *dlockProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// uniqueName returns a lock name unique to the test.
func uniqueName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + "-" + fmt.Sprint(time.Now().UnixNano())
}

var sigterm = syscall.SIGTERM

// serveAddr waits for a `dlock serve` process to log the address it
// listens on, by polling its stderr until the process exits or the test
// times out.
func serveAddr(t *testing.T, p *dlockProc) string {
	t.Helper()
	re := regexp.MustCompile(`msg="dlock: serving" addr=(\S+)`)
	for {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			return m[1]
		}
		select {
		case <-p.done:
			t.Fatalf("dlock serve exited %d; stderr:\n%s", p.code, p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
