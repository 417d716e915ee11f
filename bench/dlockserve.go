package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	dlockBinOnce sync.Once
	dlockBinPath string
	dlockBinErr  error
)

// dlockBinary builds cmd/dlock (a module of its own) once per run.
func dlockBinary() (string, error) {
	dlockBinOnce.Do(func() {
		root, ok := repoRoot()
		if !ok {
			dlockBinErr = errors.New("w5: repository root not found (run from the repository)")
			return
		}
		dir, err := os.MkdirTemp("", "dlock-bench-")
		if err != nil {
			dlockBinErr = err
			return
		}
		dlockBinPath = filepath.Join(dir, "dlock")
		build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", dlockBinPath, ".") //nolint:staticcheck // SA1019: bench runs where it was built, so GOROOT is right; PATH may lack go
		build.Dir = filepath.Join(root, "cmd", "dlock")
		if out, err := build.CombinedOutput(); err != nil {
			dlockBinErr = fmt.Errorf("w5: build cmd/dlock: %v\n%s", err, out)
		}
	})
	return dlockBinPath, dlockBinErr
}

// service is a `dlock serve` process the driver started.
type service struct {
	addr string
	cmd  *exec.Cmd
}

// startService starts `dlock serve` with args on a free loopback port and
// waits until /health answers.
func startService(ctx context.Context, args ...string) (*service, error) {
	bin, err := dlockBinary()
	if err != nil {
		return nil, err
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	return startProcess(ctx, addr, exec.Command(bin, append([]string{"serve", "--addr", addr}, args...)...))
}

// freeLoopbackAddr returns a loopback address with a port free just now,
// for a child process to listen on.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startProcess starts cmd, an HTTP service that listens on addr, and
// waits until its /health answers.
func startProcess(ctx context.Context, addr string, cmd *exec.Cmd) (*service, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &service{addr: addr, cmd: cmd}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("w5: %s on %s not healthy within 30s: %v", cmd.Path, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the process (SIGTERM, then SIGKILL after 5s) and waits for it.
func (s *service) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// cpu returns the CPU time (user + system) the process has used so far,
// from /proc (0 where it cannot be read).
func (s *service) cpu() time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name in parentheses: utime and stime are
	// the 12th and 13th, in clock ticks (100 per second on Linux).
	rest := string(b)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}
