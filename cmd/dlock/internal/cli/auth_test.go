package cli

import (
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server"
)

// TestAuthHash: dlock auth hash prints the SHA-256 of the token on stdin.
func TestAuthHash(t *testing.T) {
	for _, in := range []string{"s3cret", "s3cret\n", "  s3cret \r\nignored\n"} {
		p := startDlock(t, nil, "auth", "hash")
		p.stdin.Write([]byte(in))
		p.stdin.Close()
		if code := p.wait(); code != 0 || p.stdout() != server.HashToken("s3cret") {
			t.Errorf("dlock auth hash <<< %q = %d, %q; want 0, %q (stderr %s)", in, code, p.stdout(), server.HashToken("s3cret"), p.stderr.String())
		}
	}
}

// TestServeAuthFileReload: dlock serve --auth-file rereads the file on
// SIGHUP; a keep-alive connection survives, and a revoked token gets 401
// on it afterwards.
func TestServeAuthFileReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "auth.json")
	entry := func(tenant, tok string) string {
		return `{"tenant":"` + tenant + `","sha256":"` + server.HashToken(tok) + `","prefixes":["` + tenant + `/"],"access":"read-write"}`
	}
	write := func(entries ...string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(`{"tokens":[`+strings.Join(entries, ",")+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(entry("team-a", "token-a"), entry("team-b", "token-b"))
	serve := startDlock(t, []string{"DLOCK_AUTH_FILE=" + path, "DLOCK_ADDR=127.0.0.1:0"}, "serve")
	base := "http://" + serveAddr(t, serve)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var conns []string
	get := func(tok string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) { conns = append(conns, ci.Conn.LocalAddr().String()) },
		}), http.MethodGet, base+"/v1/locks", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET /v1/locks: %v", err)
		}
		io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("token-a"); code != http.StatusOK {
		t.Fatalf("team-a before the reload: %d, want 200", code)
	}

	write(entry("team-b", "token-b"))
	serve.signal(syscall.SIGHUP)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(serve.stderr.String(), "auth file reloaded") {
		if time.Now().After(deadline) || serve.exited() {
			t.Fatalf("no reload logged after SIGHUP; stderr:\n%s", serve.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := get("token-a"); code != http.StatusUnauthorized {
		t.Errorf("revoked team-a after the reload: %d, want 401", code)
	}
	if code := get("token-b"); code != http.StatusOK {
		t.Errorf("team-b after the reload: %d, want 200", code)
	}
	for i, c := range conns {
		if c != conns[0] {
			t.Errorf("request %d went over connection %s, want the keep-alive connection %s", i, c, conns[0])
		}
	}
	serve.signal(sigterm)
	if code := serve.wait(); code != 0 {
		t.Errorf("dlock serve exited %d after SIGTERM, want 0; stderr:\n%s", code, serve.stderr.String())
	}
}

// TestScopedTokenExitCodes: the CLI's --server client against scoped
// tokens: out of scope is a usage error (64) naming the reason, a token
// over its rate limit is 69.
func TestScopedTokenExitCodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	file := `{"tokens":[
  {"tenant":"team-a","sha256":"` + server.HashToken("token-a") + `","prefixes":["team-a/"],"access":"read-write"},
  {"tenant":"slow","sha256":"` + server.HashToken("token-slow") + `","prefixes":["slow/"],"access":"read-write","acquiresPerSecond":0.001}
]}`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := startDlock(t, []string{"DLOCK_AUTH_FILE=" + path, "DLOCK_ADDR=127.0.0.1:0"}, "serve")
	url := "http://" + serveAddr(t, serve)

	a := []string{"DLOCK_SERVER=" + url, "DLOCK_AUTH_TOKEN=token-a"}
	if code, _, stderr := runDlock(t, a, "acquire", "team-b/x"); code != runner.ExitUsage || !strings.Contains(stderr, "out of scope") {
		t.Errorf("dlock acquire team-b/x with team-a's token = %d, stderr %q; want %d naming out of scope", code, stderr, runner.ExitUsage)
	}
	if code, out, stderr := runDlock(t, a, "acquire", "team-a/x"); code != 0 {
		t.Errorf("dlock acquire team-a/x with team-a's token = %d, %q; stderr %q", code, out, stderr)
	}
	slow := []string{"DLOCK_SERVER=" + url, "DLOCK_AUTH_TOKEN=token-slow"}
	if code, _, stderr := runDlock(t, slow, "acquire", "slow/1"); code != 0 {
		t.Fatalf("first acquire of the rate-limited token = %d; stderr %q", code, stderr)
	}
	if code, _, stderr := runDlock(t, slow, "acquire", "slow/2"); code != runner.ExitUnavailable || !strings.Contains(stderr, "429") {
		t.Errorf("second acquire of the rate-limited token = %d, stderr %q; want %d with the server's 429", code, stderr, runner.ExitUnavailable)
	}
	serve.signal(sigterm)
	serve.wait()
}
