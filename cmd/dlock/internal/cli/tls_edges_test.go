package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
)

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../../../docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCertificateUsersToldAboutCredentials: a CLI that authenticates with a
// client certificate and no token is never told about tokens (issue 40 item
// 6): an unlisted certificate hears of credentials and its identity, an
// out-of-scope name of the certificate's name prefixes, word for word as
// docs/cli.md quotes them.
func TestCertificateUsersToldAboutCredentials(t *testing.T) {
	c := makeCerts(t, map[string]string{"team-a": "spiffe://dlock.test/team-a", "stranger": "spiffe://dlock.test/stranger"})
	authPath := filepath.Join(c.dir, "auth.json")
	entry := `{"tenant":"team-a","identity":"uri:spiffe://dlock.test/team-a","prefixes":["team-a/"],"access":"read-write"}`
	if err := os.WriteFile(authPath, []byte(`{"tokens":[`+entry+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := startDlock(t, nil, "serve", "--addr", "127.0.0.1:0", "--tls-cert", c.cert, "--tls-key", c.key,
		"--client-ca", c.caFile, "--auth-file", authPath)
	url := "https://" + serveAddr(t, serve)
	as := func(who string) []string {
		return []string{"DLOCK_SERVER=" + url, "DLOCK_CA_FILE=" + c.caFile, "DLOCK_CERT=" + c.clientKeys[who][0], "DLOCK_KEY=" + c.clientKeys[who][1]}
	}
	doc := readDoc(t, "cli.md")
	for _, tc := range []struct {
		who, name, want string
	}{
		{"stranger", "team-a/x", `dlock: the server refused the credentials (the client certificate, no auth token); it said 401 unauthorized: the client certificate's identity "uri:spiffe://dlock.test/stranger" is not in the auth file, and no bearer token`},
		{"team-a", "team-b/x", `dlock: invalid credentials: server said 403 out of scope: tenant "team-a": lock "team-b/x" is outside the name prefixes of the client certificate "uri:spiffe://dlock.test/team-a"`},
	} {
		code, _, stderr := runDlock(t, as(tc.who), "acquire", tc.name)
		if got := strings.TrimSpace(stderr); code != runner.ExitUsage || got != tc.want {
			t.Errorf("%s's certificate acquiring %s = %d, stderr %q; want %d, %q", tc.who, tc.name, code, got, runner.ExitUsage, tc.want)
		}
		if strings.Contains(stderr, "token's") || strings.Contains(stderr, "--auth-token") {
			t.Errorf("a certificate user was told about tokens: %q", stderr)
		}
		if !strings.Contains(doc, tc.want) {
			t.Errorf("docs/cli.md does not quote %q", tc.want)
		}
	}
	serve.signal(sigterm)
	serve.wait()
}

// TestTLSEdgeCases (issue 40 item 7): a server that wants a client
// certificate, trusted through SSL_CERT_FILE with no TLS flag, gets the
// named error rather than a bare broken pipe; what curl prints there is
// what docs/operations.md quotes; a TLS flag with another store names that
// flag (the command of docs/cli.md, as written); a --key that is not the
// key of --cert is a usage error (64).
func TestTLSEdgeCases(t *testing.T) {
	c := makeCerts(t, map[string]string{"team-a": "spiffe://dlock.test/team-a", "reader": "spiffe://dlock.test/reader"})
	serve := startDlock(t, nil, "serve", "--addr", "127.0.0.1:0", "--tls-cert", c.cert, "--tls-key", c.key, "--client-ca", c.caFile)
	addr := serveAddr(t, serve)
	url := "https://" + addr

	const want = "client certificate required by the server: set --cert and --key (DLOCK_CERT, DLOCK_KEY)"
	for _, args := range [][]string{{"acquire", "x"}, {"status", "x"}, {"list"}} {
		code, _, stderr := runDlock(t, []string{"SSL_CERT_FILE=" + c.caFile, "DLOCK_SERVER=" + url}, args...)
		if code != runner.ExitUnavailable || !strings.Contains(stderr, want) {
			t.Errorf("dlock %s trusting the CA by SSL_CERT_FILE = %d, stderr %q; want %d and %q", strings.Join(args, " "), code, stderr, runner.ExitUnavailable, want)
		}
	}

	if curl, err := exec.LookPath("curl"); err == nil {
		var stderr bytes.Buffer
		cmd := exec.Command(curl, "-sS", "--cacert", c.caFile, url+"/health")
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil {
			t.Errorf("curl without a client certificate succeeded")
		}
		got := strings.TrimSpace(stderr.String())
		if ops := readDoc(t, "operations.md"); got == "" || !strings.Contains(ops, got) {
			t.Errorf("curl without a client certificate printed %q; docs/operations.md does not quote it", got)
		}
	} else {
		t.Log("no curl: its message is not checked")
	}

	doc := readDoc(t, "cli.md")
	_, example, ok := strings.Cut(doc, "$ dlock acquire --redis-url ")
	if !ok {
		t.Fatal("docs/cli.md has no example of a TLS flag with --redis-url")
	}
	lines := strings.SplitN(example, "\n", 3)
	args := append([]string{"acquire", "--redis-url"}, strings.Fields(lines[0])...)
	code, _, stderr := runDlock(t, nil, args...)
	if got := strings.TrimSpace(stderr); code != runner.ExitUsage || got != lines[1] {
		t.Errorf("dlock %s = %d, stderr %q; want %d and docs/cli.md's %q", strings.Join(args, " "), code, got, runner.ExitUsage, lines[1])
	}
	code, _, stderr = runDlock(t, nil, "acquire", "--redis-url", "redis://127.0.0.1:1", "--ca-file", c.caFile, "x")
	if code != runner.ExitUsage || !strings.Contains(stderr, "invalid ca-file: --ca-file applies to --server only") {
		t.Errorf("dlock acquire --redis-url --ca-file = %d, stderr %q; want %d naming --ca-file", code, stderr, runner.ExitUsage)
	}

	// team-a's certificate with reader's key.
	code, _, stderr = runDlock(t, nil, "acquire", "--server", url, "--ca-file", c.caFile,
		"--cert", c.clientKeys["team-a"][0], "--key", c.clientKeys["reader"][1], "x")
	if code != runner.ExitUsage || !strings.Contains(stderr, "invalid key: --cert ") || !strings.Contains(stderr, "private key does not match public key") {
		t.Errorf("dlock acquire with a --key not of --cert = %d, stderr %q; want %d, invalid key", code, stderr, runner.ExitUsage)
	}
	code, _, stderr = runDlock(t, nil, "acquire", "--server", url, "--ca-file", filepath.Join(c.dir, "missing.pem"), "x")
	if code != runner.ExitUsage || !strings.Contains(stderr, "invalid ca-file: open ") {
		t.Errorf("dlock acquire with a missing --ca-file = %d, stderr %q; want %d, invalid ca-file", code, stderr, runner.ExitUsage)
	}
	serve.signal(sigterm)
	serve.wait()
}
