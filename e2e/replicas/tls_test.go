package replicas

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// tlsFiles, when set, makes the harness speak TLS: replicas serve mutual
// TLS with an auth file mapping the clients' certificate to a tenant, and
// haproxy passes TLS through (the configuration of docs/operations.md).
var tlsFiles *pkiFiles

type pkiFiles struct {
	dir, ca, auth, check string
	client               *tls.Config
}

func scheme() string {
	if tlsFiles != nil {
		return "https://"
	}
	return "http://"
}

func replicaTLSArgs() []string {
	if tlsFiles == nil {
		return nil
	}
	in := func(f string) string { return filepath.Join(tlsFiles.dir, f) }
	return []string{"--tls-cert", in("server.pem"), "--tls-key", in("server-key.pem"),
		"--client-ca", tlsFiles.ca, "--auth-file", tlsFiles.auth}
}

// httpClient is a client of the replicas and the balancer: keep-alive,
// idle connections per host, and the test's client certificate under TLS.
func httpClient(timeout time.Duration, idle int) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: idle}
	if tlsFiles != nil {
		tr.TLSClientConfig = tlsFiles.client.Clone()
	}
	return &http.Client{Timeout: timeout, Transport: tr}
}

// useTLS makes the certificates (cmd/dlock/internal/tlstest/mkcerts) and
// turns the harness to TLS until the test ends.
func useTLS(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	mk := filepath.Join(dir, "mkcerts")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", mk, "./internal/tlstest/mkcerts") //nolint:staticcheck // SA1019: the test runs where it was built, so GOROOT is right; PATH may lack go
	build.Dir = filepath.Join("..", "..", "cmd", "dlock")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build mkcerts: %v\n%s", err, out)
	}
	if out, err := exec.Command(mk, dir).CombinedOutput(); err != nil {
		t.Fatalf("mkcerts: %v\n%s", err, out)
	}
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	p := &pkiFiles{dir: dir, ca: filepath.Join(dir, "ca.pem"), auth: filepath.Join(dir, "auth.json"), check: filepath.Join(dir, "check-client.pem")}
	// haproxy's health check presents the reader's certificate and key, in one file.
	if err := os.WriteFile(p.check, append(read("reader.pem"), read("reader-key.pem")...), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := `{"tokens":[{"tenant":"accounts","identity":"uri:spiffe://dlock.test/team-a","prefixes":["acct-","tp-"],"access":"read-write"}]}`
	if err := os.WriteFile(p.auth, []byte(auth), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(read("team-a.pem"), read("team-a-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(read("ca.pem"))
	p.client = &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}
	tlsFiles = p
	t.Cleanup(func() { tlsFiles = nil })
}

// startTLSBalancer starts haproxy with the pass-through configuration of
// docs/operations.md ("Behind a load balancer"), its paths, address and
// server lines replaced by the test's.
func startTLSBalancer(t *testing.T, bin, addr string, replicas []*replica) *balancer {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "```haproxy\n")
	cfg, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("docs/operations.md has no haproxy block")
	}
	var lines []string
	for _, l := range strings.Split(cfg, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "server ") {
			lines = append(lines, l)
		}
	}
	for i, r := range replicas {
		lines = append(lines, fmt.Sprintf("    server r%d %s", i, strings.TrimPrefix(r.url, "https://")))
	}
	cfg = strings.NewReplacer(
		"bind :3009", "bind "+addr,
		"/etc/haproxy/dlock-ca.pem", tlsFiles.ca,
		"/etc/haproxy/check-client.pem", tlsFiles.check,
	).Replace(strings.Join(lines, "\n") + "\n")
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &balancer{url: "https://" + addr}
	b.proc = start(t, "haproxy", bin, "-db", "-f", path)
	waitHealthy(t, b.proc, b.url)
	return b
}

// TestReplicasBehindBalancerTLS is TestReplicasBehindBalancer with TLS end
// to end: three replicas serve mutual TLS, haproxy passes TLS through with
// the configuration of docs/operations.md, and the 16 clients are
// authorised by their certificate alone (an auth file identity).
func TestReplicasBehindBalancerTLS(t *testing.T) {
	haproxyPath(t)
	useTLS(t)
	replicasBehindBalancer(t)
}
