//go:build unix

package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/store/memory"
)

// startServer serves the /v1 API on a memory store on a free loopback port
// until the test ends, and returns its URL.
func startServer(t *testing.T, authToken string) string {
	t.Helper()
	m := dlockprom.New()
	locker, err := dlock.New(memory.New(), dlock.WithObserver(m.Observe))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(locker, server.Config{AuthToken: authToken, Metrics: m, StoreName: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		locker.Close()
	})
	return "http://" + ln.Addr().String()
}

func TestRunAgainstServer(t *testing.T) {
	url := startServer(t, "s3cret")
	env := []string{"DLOCK_SERVER=" + url, "DLOCK_AUTH_TOKEN=s3cret"}
	name := uniqueName(t)

	holder := startDlock(t, env, "run", "--ttl", "1s", name, "--", "sh", "-c", `echo "$DLOCK_FENCE $DLOCK_TOKEN"; read x`)
	f := strings.Fields(holder.line())
	if len(f) != 2 {
		t.Fatalf("command printed %q, want FENCE TOKEN", f)
	}
	token := f[1]

	code, _, stderr := runDlock(t, env, "run", name, "--", "echo", "ran")
	if code != runner.ExitLocked {
		t.Errorf("second dlock run --server exited %d, want %d; stderr:\n%s", code, runner.ExitLocked, stderr)
	}
	code, out, stderr := runDlock(t, env, "status", "--json", name)
	var st stateJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || !st.Held || st.Holders != 1 || st.Fence <= 0 {
		t.Errorf("dlock status --json = %d, %q (%v), want held; stderr:\n%s", code, out, err, stderr)
	}
	code, out, _ = runDlock(t, env, "list")
	if code != 0 || !strings.Contains(out, name) {
		t.Errorf("dlock list = %d, %q; want %s listed", code, out, name)
	}

	// Someone releases the lease underneath: the next renewal through the
	// server is refused and the command is stopped.
	code, _, stderr = runDlock(t, env, "release", "--token", token, name)
	if code != 0 {
		t.Fatalf("dlock release = %d; stderr:\n%s", code, stderr)
	}
	if code := holder.wait(); code != runner.ExitLeaseLost {
		t.Errorf("dlock run --server exited %d after its lease was released underneath, want %d; stderr:\n%s",
			code, runner.ExitLeaseLost, holder.stderr.String())
	}

	code, out, stderr = runDlock(t, env, "run", name, "--", "sh", "-c", "echo $DLOCK_NAME; exit 3")
	if code != 3 || out != name {
		t.Errorf("dlock run --server after release = %d, %q; want 3, %q; stderr:\n%s", code, out, name, stderr)
	}
}

func TestServerAuthTokenRejected(t *testing.T) {
	url := startServer(t, "s3cret")
	code, _, stderr := runDlock(t, []string{"DLOCK_SERVER=" + url, "DLOCK_AUTH_TOKEN=wrong"}, "run", uniqueName(t), "--", "true")
	if code != runner.ExitUsage || !strings.Contains(stderr, "auth token") {
		t.Errorf("dlock run with a wrong auth token = %d, stderr %q; want %d and a message about the auth token", code, stderr, runner.ExitUsage)
	}
	// No token at all: say the server needs one, not that it is invalid.
	code, _, stderr = runDlock(t, []string{"DLOCK_SERVER=" + url}, "status", uniqueName(t))
	if code != runner.ExitUsage || !strings.Contains(stderr, "the server requires --auth-token") || strings.Contains(stderr, "invalid auth token") {
		t.Errorf("dlock status without an auth token = %d, stderr %q; want %d and \"the server requires --auth-token\"", code, stderr, runner.ExitUsage)
	}
}

func TestServerUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	code, _, stderr := runDlock(t, []string{"DLOCK_SERVER=" + url}, "run", uniqueName(t), "--", "true")
	if code != runner.ExitUnavailable {
		t.Errorf("dlock run against a closed port = %d, want %d; stderr:\n%s", code, runner.ExitUnavailable, stderr)
	}
}

// TestServe runs `dlock serve` in-process on a free port and checks
// /health, then that cancelling stops it cleanly.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stdout bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--addr", "127.0.0.1:0"}, Env{Stdout: &stdout, Stderr: pw, Getenv: func(string) string { return "" }})
		pw.Close()
	}()
	// The service logs the address it listens on.
	addrRE := regexp.MustCompile(`msg="dlock: serving" addr=(\S+)`)
	sc := bufio.NewScanner(pr)
	var addr string
	var logs []string
	for addr == "" && sc.Scan() {
		logs = append(logs, sc.Text())
		if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
	}
	go io.Copy(io.Discard, pr)
	if addr == "" {
		t.Fatalf("dlock serve exited %d without serving; log:\n%s", <-done, strings.Join(logs, "\n"))
	}
	if !strings.Contains(strings.Join(logs, "\n"), "local to this process") {
		t.Errorf("log does not say locks are local to the process:\n%s", strings.Join(logs, "\n"))
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"ok"`) {
		t.Errorf("GET /health = %d %s, want 200 ok", resp.StatusCode, body)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("dlock serve exited %d after its context ended, want 0", code)
	}
}
