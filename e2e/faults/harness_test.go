package faults

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
)

var longFlag = flag.Bool("long", false, "run the long profile (several seeds, longer runs); DLOCK_LONG=1 does the same")

// long reports whether the long profile is on.
func long() bool {
	v, _ := strconv.ParseBool(os.Getenv("DLOCK_LONG"))
	return *longFlag || v
}

// workerBin is the worker binary, built once by TestMain.
var workerBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "dlock-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(2)
	}
	workerBin = filepath.Join(dir, "worker")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // SA1019: the test runs where it was built, so GOROOT is right; PATH may lack go
	build := exec.Command(goBin, "build", "-o", workerBin, "github.com/dlock-dev/dlock/e2e/cmd/worker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "faults: build the worker:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	// The template cluster serves every test of the binary that starts a
	// PostgreSQL server (T33, T34b): removed once, after them all.
	pgtest.Cleanup()
	printTable(os.Stdout, false)
	if path := os.Getenv("DLOCK_FAULTS_TABLE"); path != "" {
		// go test shows a passing package's output only with -v; the
		// table can be kept in a file too (Markdown for a .md path).
		if f, err := os.Create(path); err == nil {
			printTable(f, strings.HasSuffix(path, ".md"))
			f.Close()
		}
	}
	os.RemoveAll(dir)
	if code == 0 {
		// toxiproxy v2.12.0's Proxy.Stop closes connections without
		// waiting for their link goroutines, which a toxic (latency,
		// reset_peer) can leave blocked for good: its leak, not ours.
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write"),
			goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).RemoveToxic.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "faults: goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env is one scenario's world: redis-server nodes, the fenced register, a
// toxiproxy per worker-to-node and worker-to-register link, and the workers.
type env struct {
	t     *testing.T
	nodes []*testredis.Server
	reg   *register
	tp    *toxiproxy.ApiServer
	store string // "valkey", "redlock" or a store of the worker's extraStores
	// args are flags every worker of the env gets after the harness's
	// own (a store's -opt key=value)
	args []string

	mu      sync.Mutex
	workers []*worker
	faults  []string
}

func newEnv(t *testing.T, nodes int, fenced bool, opts ...testredis.Option) *env {
	t.Helper()
	var srvs []*testredis.Server
	for range nodes {
		srvs = append(srvs, testredis.Start(t, opts...))
	}
	return newEnvOn(t, fenced, srvs...)
}

// newEnvOn is newEnv over nodes already started, which a group of
// scenarios may share (servers started once per group).
func newEnvOn(t *testing.T, fenced bool, nodes ...*testredis.Server) *env {
	t.Helper()
	e := &env{t: t, store: "valkey", nodes: nodes}
	if len(nodes) > 1 {
		e.store = "redlock"
	}
	e.reg = newRegister(t, fenced)
	e.tp = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	return e
}

// fault records an injected fault for the results table and the log.
func (e *env) fault(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	e.t.Logf("fault: %s", s)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.faults {
		if f == s {
			return
		}
	}
	e.faults = append(e.faults, s)
}

func (e *env) proxy(name, upstream string) *toxiproxy.Proxy {
	e.t.Helper()
	p := toxiproxy.NewProxy(e.tp, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		e.t.Fatalf("start proxy %s: %v", name, err)
	}
	e.t.Cleanup(p.Stop)
	return p
}

// worker is one worker process and the events it has printed.
type worker struct {
	e     *env
	id    int
	cmd   *exec.Cmd
	links []*toxiproxy.Proxy // one per node
	reg   *toxiproxy.Proxy   // to the register

	mu      sync.Mutex
	events  []wire.Event
	changed chan struct{} // closed and replaced on every new event
	stderr  bytes.Buffer
	exited  chan struct{}
	killed  bool // by the harness, on purpose
}

// spawn starts worker id with the given worker flags; see prepare.
func (e *env) spawn(id int, args ...string) *worker {
	e.t.Helper()
	return e.prepare(id).start(args...)
}

// prepare makes worker id's links, each its own proxy, so that toxics can
// be put on them before the worker starts.
func (e *env) prepare(id int) *worker {
	e.t.Helper()
	w := &worker{e: e, id: id, changed: make(chan struct{}), exited: make(chan struct{})}
	for i, n := range e.nodes {
		w.links = append(w.links, e.proxy(fmt.Sprintf("w%d-n%d", id, i), n.Addr()))
	}
	w.reg = e.proxy(fmt.Sprintf("w%d-reg", id), e.reg.addr())
	return w
}

// start starts a prepared worker with the given worker flags; -id, -store,
// -addrs and -register are added.
func (w *worker) start(args ...string) *worker {
	e, id := w.e, w.id
	e.t.Helper()
	var addrs []string
	for _, p := range w.links {
		addrs = append(addrs, p.Listen)
	}
	argv := append([]string{
		"-id", strconv.Itoa(id),
		"-store", e.store,
		"-addrs", strings.Join(addrs, ","),
		"-register", "http://" + w.reg.Listen,
	}, e.args...)
	argv = append(argv, args...)
	w.cmd = exec.Command(workerBin, argv...)
	w.cmd.Stderr = &w.stderr
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		e.t.Fatalf("start worker %d: %v", id, err)
	}
	e.t.Cleanup(w.kill)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev wire.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				continue
			}
			w.mu.Lock()
			w.events = append(w.events, ev)
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
		}
		w.cmd.Wait()
		close(w.exited)
	}()
	e.mu.Lock()
	e.workers = append(e.workers, w)
	e.mu.Unlock()
	return w
}

func (w *worker) pid() int { return w.cmd.Process.Pid }

// crash SIGKILLs the worker on purpose (a fault) and waits for it.
func (w *worker) crash() {
	w.killed = true
	w.kill()
}

// kill SIGKILLs the worker (by PID) if it still runs and waits for it.
func (w *worker) kill() {
	select {
	case <-w.exited:
		return
	default:
	}
	w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.exited
}

// pause SIGSTOPs the worker and returns once it is stopped.
func (w *worker) pause() {
	w.e.t.Helper()
	w.cmd.Process.Signal(syscall.SIGSTOP)
	if !waitProcState(w.pid(), 'T', 10*time.Second) {
		w.e.t.Fatalf("worker %d did not stop", w.id)
	}
}

// resume SIGCONTs the worker and returns its CLOCK_MONOTONIC time.
func (w *worker) resume() int64 {
	t := wire.Now()
	w.cmd.Process.Signal(syscall.SIGCONT)
	return t
}

// waitStopped waits until the worker has stopped itself (SIGSTOP).
func (w *worker) waitStopped(timeout time.Duration) {
	w.e.t.Helper()
	if _, ok := w.waitEvent(timeout, func(ev wire.Event) bool { return ev.Kind == wire.KindStopSelf }); !ok {
		w.e.t.Fatalf("worker %d never reached its stop point\n%s", w.id, w.stderrText())
	}
	if !waitProcState(w.pid(), 'T', timeout) {
		w.e.t.Fatalf("worker %d did not stop itself", w.id)
	}
}

// waitProcState polls /proc until pid is in state (a bounded wait on an
// external process).
func waitProcState(pid int, state byte, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// pid (comm) S ...: the state follows the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == state {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// waitEvent waits for the first event matching pred.
func (w *worker) waitEvent(timeout time.Duration, pred func(wire.Event) bool) (wire.Event, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	seen := 0
	for {
		w.mu.Lock()
		for ; seen < len(w.events); seen++ {
			if pred(w.events[seen]) {
				ev := w.events[seen]
				w.mu.Unlock()
				return ev, true
			}
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-w.exited:
			// Drain what was printed before the exit.
			w.mu.Lock()
			for ; seen < len(w.events); seen++ {
				if pred(w.events[seen]) {
					ev := w.events[seen]
					w.mu.Unlock()
					return ev, true
				}
			}
			w.mu.Unlock()
			return wire.Event{}, false
		case <-timer.C:
			return wire.Event{}, false
		}
	}
}

func isKind(k string) func(wire.Event) bool {
	return func(ev wire.Event) bool { return ev.Kind == k }
}

// wait waits for the worker to exit by itself and fails the test if it
// does not within timeout or exits with an error.
func (w *worker) wait(timeout time.Duration) {
	w.e.t.Helper()
	select {
	case <-w.exited:
	case <-time.After(timeout):
		// SIGQUIT makes the Go runtime print every goroutine's stack.
		w.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-w.exited:
		case <-time.After(5 * time.Second):
			w.kill()
		}
		w.e.t.Fatalf("worker %d still running after %v; its events:\n%s\n%s", w.id, timeout, w.eventsText(), w.stderrText())
	}
	if !w.killed && !w.cmd.ProcessState.Success() {
		w.e.t.Errorf("worker %d: %v\n%s", w.id, w.cmd.ProcessState, w.stderrText())
	}
}

func (w *worker) stderrText() string {
	select {
	case <-w.exited:
		return w.stderr.String()
	default:
		return "(worker still running)"
	}
}

func (w *worker) eventsText() string {
	var b strings.Builder
	for _, ev := range w.snapshot() {
		j, _ := json.Marshal(ev)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func (w *worker) snapshot() []wire.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wire.Event(nil), w.events...)
}

// history returns every worker's events.
func (e *env) history() []wire.Event {
	e.mu.Lock()
	ws := append([]*worker(nil), e.workers...)
	e.mu.Unlock()
	var all []wire.Event
	for _, w := range ws {
		all = append(all, w.snapshot()...)
	}
	return all
}

// waitAll waits for every worker to exit.
func (e *env) waitAll(timeout time.Duration) {
	e.t.Helper()
	e.mu.Lock()
	ws := append([]*worker(nil), e.workers...)
	e.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for _, w := range ws {
		w.wait(max(time.Until(deadline), time.Millisecond))
	}
}

// toxic adds a toxic to p; typ is a toxiproxy toxic type, stream
// "upstream" (towards the server) or "downstream" (replies).
func (e *env) toxic(p *toxiproxy.Proxy, name, typ, stream string, attrs map[string]any) {
	e.t.Helper()
	if err := addToxic(p, name, typ, stream, attrs); err != nil {
		e.t.Fatal(err)
	}
}

// addToxic is toxic for goroutines other than the test's.
func addToxic(p *toxiproxy.Proxy, name, typ, stream string, attrs map[string]any) error {
	b, _ := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "attributes": attrs})
	if _, err := p.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("add toxic %s to %s: %v", name, p.Name, err)
	}
	return nil
}
