package soak

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

// service is the `dlock serve` process; it keeps its address across
// restarts.
type service struct {
	addr    string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	started time.Time
}

func newService(dir string, args ...string) (*service, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	return &service{addr: addr, logPath: filepath.Join(dir, "serve.log"),
		args: append([]string{"serve", "--addr", addr, "--log-level", "warn"}, args...)}, nil
}

// start starts the process and waits (bounded) until /health answers 200.
func (s *service) start() error {
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(dlockBin, s.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.started = cmd, exited, time.Now()
	s.mu.Unlock()
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := client.Get("http://" + s.addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("dlock serve exited; log %s", s.logPath)
		default:
		}
	}
	s.kill()
	return fmt.Errorf("dlock serve not healthy after 30s; log %s", s.logPath)
}

func (s *service) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// kill SIGKILLs the process by PID and waits for it.
func (s *service) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	select {
	case <-exited:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies too, but be plain
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

func (s *service) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Signal(sig)
}

// metrics scrapes the server's Go runtime gauges.
func (s *service) metrics(client *http.Client) (goroutines, heap float64, err error) {
	resp, err := client.Get("http://" + s.addr + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch k {
		case "go_goroutines":
			goroutines, err = strconv.ParseFloat(v, 64)
			found++
		case "go_memstats_heap_alloc_bytes":
			heap, err = strconv.ParseFloat(v, 64)
			found++
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if found != 2 {
		return 0, 0, errors.New("go_goroutines or go_memstats_heap_alloc_bytes missing from /metrics")
	}
	return goroutines, heap, sc.Err()
}

// fdCount counts the open file descriptors of pid.
func fdCount(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// waitProcState polls /proc until pid is in state ('T' stopped), bounded.
func waitProcState(pid int, state byte, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == state {
			return true
		}
	}
	return false
}

// workerSlot is a place for one worker process (e2e/cmd/worker) with its
// own links to the node and to the register; a killed worker is replaced
// in the same slot, on the same links.
type workerSlot struct {
	id      int
	node    *toxiproxy.Proxy
	reg     *toxiproxy.Proxy
	ttl     time.Duration
	chk     *checker
	started int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr bytes.Buffer
	errs   []string // unexpected exits
}

// spawn starts a worker on a random name and mode, for at most d.
func (w *workerSlot) spawn(name, mode string, d time.Duration) error {
	w.started++
	id := w.id*1000 + w.started
	args := []string{"-id", strconv.Itoa(id), "-store", "valkey", "-addrs", w.node.Listen,
		"-register", "http://" + w.reg.Listen + "/" + name, "-key", name, "-mode", mode,
		"-ttl", w.ttl.String(), "-careful", "-rmw", "-iters", "100000000", "-duration", d.String(),
		"-hold", "30ms", "-gap", "10ms", "-wait", "1s", "-op-timeout", "500ms", "-queue-ttl", "1s"}
	cmd := exec.Command(workerBin, args...)
	w.mu.Lock()
	w.stderr.Reset()
	cmd.Stderr = &w.stderr
	w.mu.Unlock()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	w.mu.Lock()
	w.cmd, w.exited = cmd, exited
	w.mu.Unlock()
	who := "w" + strconv.Itoa(id)
	go func() {
		defer close(exited)
		w.follow(out, name, who)
		if err := cmd.Wait(); err != nil && !isKill(err) {
			w.mu.Lock()
			w.errs = append(w.errs, fmt.Sprintf("%s: %v: %s", who, err, w.stderr.String()))
			w.mu.Unlock()
		}
	}()
	return nil
}

func isKill(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// follow reads the worker's events and feeds its grants and holds to the
// checker. A hold ends at the section's exit or at the validity the library
// promises a lease from its acquire call, invoke + TTL - drift (default
// factor: TTL/100 + 2ms), whichever is first; a worker killed or paused in
// its section holds until then. Without the drift the bound is too tight:
// Valkey times expiry on its wall clock at millisecond resolution, not on
// CLOCK_MONOTONIC, and a 30-minute run saw one grant 0.2ms inside
// invoke + TTL.
func (w *workerSlot) follow(out interface{ Read([]byte) (int, error) }, name, who string) {
	type open struct {
		invoke int64
		h      hold
		in     bool
	}
	opens := map[int]*open{}
	finish := func(o *open, end int64) {
		o.h.end = min(end, o.invoke+int64(w.ttl-workerDrift(w.ttl)))
		w.chk.finished(o.h)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var ev wire.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Kind {
		case wire.KindInvoke:
			opens[ev.Iter] = &open{invoke: ev.T}
		case wire.KindAcquire:
			o := opens[ev.Iter]
			if o == nil {
				continue
			}
			o.in = true
			o.h = hold{name: name, holder: who, mode: ev.Mode, start: ev.T}
			w.chk.granted(name, grantRec{invoke: o.invoke, ret: ev.T, fence: ev.Fence, excl: exclusive(ev.Mode), who: who, kind: ev.Mode})
		case wire.KindExit:
			if o := opens[ev.Iter]; o != nil && o.in {
				finish(o, ev.T)
			}
			delete(opens, ev.Iter)
		case wire.KindFail:
			delete(opens, ev.Iter)
		}
	}
	for _, o := range opens {
		if o.in {
			finish(o, math.MaxInt64)
		}
	}
}

// workerDrift is the library's default validity margin for a lease of ttl
// (the workers run with the default drift factor, 0.01).
func workerDrift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

func (w *workerSlot) current() (*exec.Cmd, chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cmd, w.exited
}

// kill SIGKILLs the worker by PID and waits for it.
func (w *workerSlot) kill() {
	cmd, exited := w.current()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

func (w *workerSlot) running() bool {
	cmd, exited := w.current()
	if cmd == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// socketPorts maps the socket inodes of this process's network namespace
// to their local and remote TCP ports (/proc/net/tcp and tcp6).
func socketPorts() map[string][2]int {
	m := map[string][2]int{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 {
				continue
			}
			port := func(a string) int {
				_, p, _ := strings.Cut(a, ":")
				n, _ := strconv.ParseInt(p, 16, 32)
				return int(n)
			}
			m[fs[9]] = [2]int{port(fs[1]), port(fs[2])}
		}
	}
	return m
}

// ownFDs counts this process's descriptors apart from toxiproxy's sockets
// (accepted on a proxy's port, or dialled by a proxy to an upstream):
// returned second.
func ownFDs(proxyPorts, upstreamPorts map[int]bool) (own, proxied int, detail string) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1, 0, err.Error()
	}
	ports := socketPorts()
	var b strings.Builder
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if ino, ok := strings.CutPrefix(target, "socket:["); ok {
			p, known := ports[strings.TrimSuffix(ino, "]")]
			if known && (proxyPorts[p[0]] || upstreamPorts[p[1]]) {
				proxied++
				continue
			}
			if known {
				target = fmt.Sprintf("tcp %d->%d", p[0], p[1])
			}
		}
		own++
		fmt.Fprintf(&b, "%s=%s ", e.Name(), target)
	}
	return own, proxied, b.String()
}
