// Package replicas tests several `dlock serve` processes on one store
// behind Debian's haproxy, acting as one lock service.
package replicas

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"testing"
	"time"
)

// dlockBin is cmd/dlock, built once by TestMain.
var dlockBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlock-replicas-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		os.Exit(2)
	}
	dlockBin = filepath.Join(dir, "dlock")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", dlockBin, ".") //nolint:staticcheck // SA1019: the test runs where it was built, so GOROOT is right; PATH may lack go
	build.Dir = filepath.Join("..", "..", "cmd", "dlock")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "replicas: build cmd/dlock:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func inCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// haproxyPath finds Debian's haproxy: a test failure under CI=true when it
// is missing, else a skip.
func haproxyPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"haproxy", "/usr/sbin/haproxy"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if inCI() {
		t.Fatal("haproxy not found (CI=true): install Debian's haproxy (scripts/test.sh does)")
	}
	t.Skip("haproxy not found; install Debian's haproxy (scripts/test.sh does)")
	return ""
}

// freeAddr returns a free loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proc is a process started by a test and stopped by PID.
type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	log    bytes.Buffer
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func start(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill SIGKILLs the process by its PID and waits for it.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// waitHealthy polls url/health (a process outside the test: bounded
// polling) until it answers 200.
func waitHealthy(t *testing.T, p *proc, url string) {
	t.Helper()
	client := httpClient(2*time.Second, 1) // tls_test.go: HTTPS when the test runs TLS
	defer client.CloseIdleConnections()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := client.Get(url + "/health")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited: %s", p.name, p.output())
		default:
		}
	}
	t.Fatalf("%s not healthy after 30s: %s", p.name, p.output())
}

// replica is a `dlock serve` process.
type replica struct {
	*proc
	url string
}

// startReplica starts replica i on addr (a free one when empty).
func startReplica(t *testing.T, i int, addr string, store ...string) *replica {
	t.Helper()
	if addr == "" {
		addr = freeAddr(t)
	}
	r := &replica{url: scheme() + addr}
	args := append([]string{"serve", "--addr", addr, "--log-level", "warn"}, replicaTLSArgs()...)
	r.proc = start(t, fmt.Sprintf("replica %d", i), dlockBin, append(args, store...)...)
	waitHealthy(t, r.proc, r.url)
	return r
}

// balancer is haproxy, round-robin over the replicas, with health checks
// on /health.
type balancer struct {
	*proc
	url string
}

func startBalancer(t *testing.T, replicas []*replica) *balancer {
	t.Helper()
	bin := haproxyPath(t)
	addr := freeAddr(t)
	var servers strings.Builder
	for i, r := range replicas {
		fmt.Fprintf(&servers, "    server r%d %s check\n", i, strings.TrimPrefix(r.url, "http://"))
	}
	if tlsFiles != nil {
		return startTLSBalancer(t, bin, addr, replicas) // tls_test.go
	}
	// Timeouts longer than the longest waitMs; haproxy retries only
	// connections that failed (never a request a replica may have
	// started); clients retry the rest with their token.
	cfg := fmt.Sprintf(`global
    maxconn 4096
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    retries 3
    option redispatch 1
    retry-on conn-failure
frontend lock
    bind %s
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /health
    http-check expect status 200
    default-server inter 200ms fall 2 rise 2
%s`, addr, servers.String())
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &balancer{url: "http://" + addr}
	b.proc = start(t, "haproxy", bin, "-db", "-f", path)
	waitHealthy(t, b.proc, b.url)
	return b
}

// newToken returns a client-chosen lease token: 128 random bits in hex.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// reply is a /v1 answer.
type reply struct {
	status int
	Token  string `json:"token"`
	Fence  int64  `json:"fence"`
	Error  string `json:"error"`
}

// post sends one /v1 call; err is a transport failure.
func post(ctx context.Context, client *http.Client, url string, body any) (reply, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	var r reply
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	json.Unmarshal(data, &r)
	r.status = resp.StatusCode
	return r, nil
}

// retryable reports whether a call's outcome is unknown or a replica or
// the balancer failed: a client retries it with the same token.
func retryable(r reply, err error) bool {
	if err != nil {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	return r.status == http.StatusBadGateway || r.status == http.StatusServiceUnavailable || r.status == http.StatusGatewayTimeout
}

// counter sums a Prometheus counter's series in the text of /metrics.
func counter(t *testing.T, url, name string) float64 {
	t.Helper()
	hc := httpClient(10*time.Second, 1)
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}
