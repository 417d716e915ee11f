package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
)

var (
	dlockOnce sync.Once
	dlockBin  string
	dlockErr  error
)

// dlockBinary builds cmd/dlock (its own module) once.
func dlockBinary(t *testing.T) string {
	t.Helper()
	dlockOnce.Do(func() {
		dlockBin = filepath.Join(filepath.Dir(workerBin), "dlock")
		build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", dlockBin, ".") //nolint:staticcheck // SA1019: the test runs where it was built, so GOROOT is right; PATH may lack go
		build.Dir = filepath.Join("..", "..", "cmd", "dlock")
		out, err := build.CombinedOutput()
		if err != nil {
			dlockErr = fmt.Errorf("build cmd/dlock: %v\n%s", err, out)
		}
	})
	if dlockErr != nil {
		t.Fatal(dlockErr)
	}
	return dlockBin
}

// service is a `dlock serve` process.
type service struct {
	t      *testing.T
	addr   string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
	log    bytes.Buffer
}

func startService(t *testing.T, args ...string) *service {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &service{t: t, addr: addr, args: append([]string{"serve", "--addr", addr}, args...)}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *service) start() {
	s.t.Helper()
	s.cmd = exec.Command(dlockBinary(s.t), s.args...)
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Wait()
		close(done)
	}(s.cmd, s.exited)
	// Bounded polling of an external process until it serves.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + s.addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-s.exited:
			s.t.Fatalf("dlock serve exited: %s", s.log.String())
		default:
		}
	}
	s.kill()
	s.t.Fatalf("dlock serve not healthy after 20s: %s", s.log.String())
}

// kill SIGKILLs the service by PID and waits for it.
func (s *service) kill() {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

type leaseReply struct {
	Token  string `json:"token"`
	Fence  int64  `json:"fence"`
	TTLMs  int64  `json:"ttlMs"`
	status int
	t      int64 // CLOCK_MONOTONIC when the reply came
}

func (s *service) call(ctx context.Context, op, name string, body any) (leaseReply, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.addr+"/v1/locks/"+name+"/"+op, bytes.NewReader(b))
	if err != nil {
		return leaseReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return leaseReply{}, err
	}
	defer resp.Body.Close()
	var r leaseReply
	json.NewDecoder(resp.Body).Decode(&r)
	r.status, r.t = resp.StatusCode, wire.Now()
	return r, nil
}

func (s *service) acquire(t *testing.T, name string, ttl, wait time.Duration) leaseReply {
	t.Helper()
	r, err := s.call(t.Context(), "acquire", name, map[string]any{"ttlMs": ttl.Milliseconds(), "waitMs": wait.Milliseconds()})
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	return r
}

func TestFaultsService(t *testing.T) {
	t.Run("T21_service_killed_valkey", func(t *testing.T) { testServiceKilled(t, true) })
	t.Run("T21_service_killed_memory", func(t *testing.T) { testServiceKilled(t, false) })
	t.Run("T22_http_client_gone", testClientGone)
}

// T21: `dlock serve` is SIGKILLed while a client holds a lock, and started
// again. On Valkey the lease outlives the service: nobody gets the lock
// before its TTL has run out, and the next fence is higher. On the embedded
// memory store the lease dies with the process (documented), but fences
// still never go back (hybrid clock floor).
func testServiceKilled(t *testing.T, onValkey bool) {
	var args []string
	if onValkey {
		node := testredis.Start(t)
		args = []string{"--redis-url", node.URL()}
	}
	s := startService(t, args...)
	const ttl = time.Second
	sent := wire.Now()
	a := s.acquire(t, "x", ttl, 0)
	if a.status != http.StatusOK {
		t.Fatalf("first acquire: status %d", a.status)
	}
	s.kill()
	s.start()
	b := s.acquire(t, "x", ttl, 5*time.Second)
	if b.status != http.StatusOK {
		t.Fatalf("acquire after the restart: status %d, want 200 within the wait", b.status)
	}
	after := time.Duration(b.t - sent)
	if onValkey && after < ttl-20*time.Millisecond {
		t.Errorf("second client granted %v after the first, want no sooner than the TTL %v (a double grant)", after, ttl)
	}
	if onValkey && after > ttl+time.Second {
		t.Errorf("second client granted %v after the first, want within TTL + 1s", after)
	}
	if b.Fence <= a.Fence {
		t.Errorf("fence after the restart %d <= fence before %d", b.Fence, a.Fence)
	}
	ext, err := s.call(t.Context(), "extend", "x", map[string]any{"token": a.Token, "ttlMs": 60000})
	if err != nil || ext.status == http.StatusOK {
		t.Errorf("stale extend after the restart: status %d, err %v; want refused", ext.status, err)
	}
	store := "memory"
	if onValkey {
		store = "valkey"
	}
	r := result{Scenario: t.Name(), Fenced: true, Grants: 2, Register: "n/a",
		Faults: "SIGKILL dlock serve (" + store + ") while a client holds x (TTL 1s), restart",
		Extra:  fmt.Sprintf("next grant %v after the first; fences %d -> %d; stale extend status %d", after.Round(time.Millisecond), a.Fence, b.Fence, ext.status)}
	if b.t-sent < int64(ttl) && onValkey {
		r.Overlaps = 1
	}
	recordResult(t, r)
}

// T22: HTTP clients that go away. (a) A client acquires and vanishes
// without extending: the lock is free when its TTL runs out. (b) A client
// waiting in a long acquire disconnects: it must not end up holding the
// lock, so a later client gets it as soon as the holder releases.
func testClientGone(t *testing.T) {
	node := testredis.Start(t)
	s := startService(t, "--redis-url", node.URL())
	const ttl = time.Second
	sent := wire.Now()
	a := s.acquire(t, "gone", ttl, 0)
	if a.status != http.StatusOK {
		t.Fatalf("acquire: status %d", a.status)
	}
	b := s.acquire(t, "gone", ttl, 5*time.Second)
	freed := time.Duration(b.t - sent)
	if b.status != http.StatusOK || freed > ttl+time.Second || freed < ttl-20*time.Millisecond {
		t.Errorf("next acquire after a vanished holder: status %d after %v, want 200 after about the TTL %v", b.status, freed, ttl)
	}
	if b.Fence <= a.Fence {
		t.Errorf("fence %d after %d, want higher", b.Fence, a.Fence)
	}

	// (b) a waiter that hangs up.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	_, err := s.call(ctx, "acquire", "gone", map[string]any{"ttlMs": 30000, "waitMs": 10000})
	cancel()
	if err == nil {
		t.Fatalf("the hung-up waiter got an answer")
	}
	rel, err := s.call(t.Context(), "release", "gone", map[string]any{"token": b.Token})
	if err != nil || rel.status != http.StatusOK {
		t.Fatalf("release: status %d, err %v", rel.status, err)
	}
	c := s.acquire(t, "gone", ttl, 2*time.Second)
	took := time.Duration(c.t - rel.t)
	if c.status != http.StatusOK || took > time.Second {
		t.Errorf("acquire after the release, with a hung-up waiter before it: status %d after %v; want 200 at once (the gone waiter must not hold it)", c.status, took)
	}
	recordResult(t, result{Scenario: t.Name(), Fenced: true, Grants: 3, Register: "n/a",
		Faults: "holder vanishes without extending (TTL 1s); a waiter hangs up mid-wait",
		Extra:  fmt.Sprintf("lock free %v after the vanished holder's acquire; next grant %v after release despite the hung-up waiter", freed.Round(time.Millisecond), took.Round(time.Millisecond))})
}

// recordResult adds a row for a scenario that has no env.
func recordResult(t *testing.T, r result) {
	r.Lost = -1
	r.Verdict = "pass"
	if t.Failed() {
		r.Verdict = "FAIL"
	}
	t.Logf("result: %s", r.Extra)
	tableMu.Lock()
	table = append(table, r)
	tableMu.Unlock()
}
