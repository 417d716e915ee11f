package cli

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/tlstest"
)

// certs is a private CA with the server's certificate and client
// certificates, as PEM files in one directory.
type certs struct {
	dir        string
	ca, other  *tlstest.CA
	caFile     string
	otherCA    string
	cert, key  string
	clientKeys map[string][2]string // name -> cert, key
}

func makeCerts(t *testing.T, clients map[string]string) *certs {
	t.Helper()
	c := &certs{dir: t.TempDir(), clientKeys: make(map[string][2]string)}
	var err error
	must := func(e error) {
		t.Helper()
		if e != nil {
			t.Fatal(e)
		}
	}
	c.ca, err = tlstest.NewCA("dlock test CA")
	must(err)
	c.other, err = tlstest.NewCA("another CA")
	must(err)
	c.caFile, err = c.ca.WriteFile(c.dir, "ca")
	must(err)
	c.otherCA, err = c.other.WriteFile(c.dir, "other-ca")
	must(err)
	srv, err := c.ca.Server()
	must(err)
	c.cert, c.key, err = srv.WriteFiles(c.dir, "server")
	must(err)
	for name, uri := range clients {
		p, err := c.ca.Issue(tlstest.Leaf{CN: name, URIs: []string{uri}})
		must(err)
		cert, key, err := p.WriteFiles(c.dir, name)
		must(err)
		c.clientKeys[name] = [2]string{cert, key}
	}
	return c
}

// waitLog waits until the process logged want, or fails.
func waitLog(t *testing.T, p *dlockProc, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stderr.String(), want) {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("%q not logged; stderr:\n%s", want, p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // poll interval of a deadline-bounded wait
	}
}

// TestRemoteTLS: dlock acquire, extend and release and dlock run through
// an https:// --server with a private CA (flags and DLOCK_* variables);
// a CLI that does not trust the CA fails naming the certificate problem;
// TLS flags without an https:// server are usage errors.
func TestRemoteTLS(t *testing.T) {
	c := makeCerts(t, nil)
	serve := startDlock(t, []string{"DLOCK_ADDR=127.0.0.1:0", "DLOCK_TLS_CERT=" + c.cert, "DLOCK_TLS_KEY=" + c.key}, "serve")
	url := "https://" + serveAddr(t, serve)
	name := uniqueName(t)

	code, out, stderr := runDlock(t, []string{"DLOCK_SERVER=" + url, "DLOCK_CA_FILE=" + c.caFile}, "acquire", "--ttl", "30s", name)
	if code != 0 {
		t.Fatalf("dlock acquire over HTTPS = %d; stderr %s", code, stderr)
	}
	token := ""
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "export DLOCK_TOKEN="); ok {
			token = strings.Trim(v, `'"`)
		}
	}
	if token == "" {
		t.Fatalf("dlock acquire printed %q, want DLOCK_TOKEN=...", out)
	}
	flags := []string{"--server", url, "--ca-file", c.caFile}
	if code, _, stderr := runDlock(t, nil, append([]string{"extend", "--ttl", "1m", "--token", token, name}, flags...)...); code != 0 {
		t.Errorf("dlock extend over HTTPS = %d; stderr %s", code, stderr)
	}
	if code, _, stderr := runDlock(t, nil, append([]string{"release", "--token", token, name}, flags...)...); code != 0 {
		t.Errorf("dlock release over HTTPS = %d; stderr %s", code, stderr)
	}
	if code, out, stderr := runDlock(t, nil, append(append([]string{"run"}, flags...), name, "--", "sh", "-c", `echo "$DLOCK_FENCE"`)...); code != 0 || out == "" {
		t.Errorf("dlock run over HTTPS = %d, %q; stderr %s", code, out, stderr)
	}

	code, _, stderr = runDlock(t, []string{"DLOCK_SERVER=" + url, "DLOCK_CA_FILE=" + c.otherCA}, "acquire", name)
	if code == 0 || !strings.Contains(stderr, "certificate signed by unknown authority") {
		t.Errorf("dlock acquire trusting another CA = %d, stderr %q; want a failure naming the certificate problem", code, stderr)
	}
	for _, args := range [][]string{
		{"acquire", "--server", strings.Replace(url, "https", "http", 1), "--ca-file", c.caFile, name},
		{"acquire", "--server", url, "--cert", c.cert, name},
		{"acquire", "--redis-url", "redis://127.0.0.1:1", "--ca-file", c.caFile, name},
	} {
		if code, _, stderr := runDlock(t, nil, args...); code != runner.ExitUsage {
			t.Errorf("dlock %s = %d, stderr %q; want the usage error %d", strings.Join(args, " "), code, stderr, runner.ExitUsage)
		}
	}
	serve.signal(sigterm)
	if code := serve.wait(); code != 0 {
		t.Errorf("dlock serve exited %d; stderr:\n%s", code, serve.stderr.String())
	}
}

// TestServeMutualTLS: dlock serve --client-ca with an auth file mapping
// certificate identities: the CLI's --cert acquires in scope, gets a
// usage error out of scope and with a read-only identity, and a revoked
// identity (removed from the file, SIGHUP) is refused on its next request.
func TestServeMutualTLS(t *testing.T) {
	c := makeCerts(t, map[string]string{"team-a": "spiffe://dlock.test/team-a", "reader": "spiffe://dlock.test/reader"})
	authPath := filepath.Join(c.dir, "auth.json")
	teamA := `{"tenant":"team-a","identity":"uri:spiffe://dlock.test/team-a","prefixes":["team-a/"],"access":"read-write"}`
	reader := `{"tenant":"ops","identity":"uri:spiffe://dlock.test/reader","prefixes":[""],"access":"read-only"}`
	write := func(entries ...string) {
		t.Helper()
		if err := os.WriteFile(authPath, []byte(`{"tokens":[`+strings.Join(entries, ",")+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(teamA, reader)
	serve := startDlock(t, nil, "serve", "--addr", "127.0.0.1:0", "--tls-cert", c.cert, "--tls-key", c.key,
		"--client-ca", c.caFile, "--auth-file", authPath)
	url := "https://" + serveAddr(t, serve)
	as := func(who string) []string {
		return []string{"DLOCK_SERVER=" + url, "DLOCK_CA_FILE=" + c.caFile, "DLOCK_CERT=" + c.clientKeys[who][0], "DLOCK_KEY=" + c.clientKeys[who][1]}
	}

	if code, _, stderr := runDlock(t, as("team-a"), "acquire", "team-a/x"); code != 0 {
		t.Errorf("team-a's certificate acquiring team-a/x = %d; stderr %s", code, stderr)
	}
	if code, _, stderr := runDlock(t, as("team-a"), "acquire", "team-b/x"); code != runner.ExitUsage || !strings.Contains(stderr, "out of scope") {
		t.Errorf("team-a's certificate acquiring team-b/x = %d, stderr %q; want %d, out of scope", code, stderr, runner.ExitUsage)
	}
	if code, _, stderr := runDlock(t, as("reader"), "acquire", "team-a/y"); code != runner.ExitUsage || !strings.Contains(stderr, "read only") {
		t.Errorf("the read-only certificate acquiring = %d, stderr %q; want %d, read only", code, stderr, runner.ExitUsage)
	}
	if code, out, stderr := runDlock(t, as("reader"), "status", "team-a/x"); code != 0 {
		t.Errorf("the read-only certificate reading = %d, %q; stderr %s", code, out, stderr)
	}
	noCert := []string{"DLOCK_SERVER=" + url, "DLOCK_CA_FILE=" + c.caFile}
	if code, _, stderr := runDlock(t, noCert, "acquire", "team-a/z"); code == 0 || !strings.Contains(stderr, "certificate required") {
		t.Errorf("no client certificate = %d, stderr %q; want a failure naming the certificate", code, stderr)
	}

	write(reader)
	serve.signal(syscall.SIGHUP)
	waitLog(t, serve, "auth file reloaded")
	if code, _, stderr := runDlock(t, as("team-a"), "acquire", "team-a/z"); code == 0 || !strings.Contains(stderr, "not in the auth file") {
		t.Errorf("revoked team-a after SIGHUP = %d, stderr %q; want refused, naming the identity", code, stderr)
	}
	serve.signal(sigterm)
	serve.wait()
}

// TestServeTLSRotationUnderLoad: 16 clients acquire and release over
// HTTPS (each opening a new connection every few requests) while the
// server's certificate is replaced and SIGHUP sent: no request fails, and
// handshakes after the reload see the new certificate. Then an expired
// certificate at SIGHUP is refused and logged, the new one kept.
func TestServeTLSRotationUnderLoad(t *testing.T) {
	c := makeCerts(t, nil)
	serve := startDlock(t, []string{"DLOCK_ADDR=127.0.0.1:0", "DLOCK_TLS_CERT=" + c.cert, "DLOCK_TLS_KEY=" + c.key}, "serve")
	url := "https://" + serveAddr(t, serve)
	roots := x509.NewCertPool()
	roots.AddCert(c.ca.Cert)

	var (
		mu       sync.Mutex
		serials  = map[string]int{} // serial -> handshakes seen
		reloaded atomic.Bool
		lateOld  atomic.Int64 // handshakes begun after the reload was logged that saw another serial
		newSN    atomic.Value
		ops      atomic.Int64
		failures = make(chan error, 16)
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	newSN.Store("")
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var afterReload atomic.Bool // read by the transport's dialing goroutine
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots,
				VerifyConnection: func(cs tls.ConnectionState) error {
					sn := cs.PeerCertificates[0].SerialNumber.String()
					mu.Lock()
					serials[sn]++
					mu.Unlock()
					if afterReload.Load() && sn != newSN.Load().(string) {
						lateOld.Add(1)
					}
					return nil
				}}}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if n%5 == 0 {
					tr.CloseIdleConnections() // the next request makes a new handshake
					afterReload.Store(reloaded.Load())
				}
				name := fmt.Sprintf("rotate/%d", i)
				var got struct{ Token string }
				if err := postJSON(hc, url+"/v1/locks/"+strings.ReplaceAll(name, "/", "%2F")+"/acquire", `{"ttlMs":30000}`, &got); err != nil {
					failures <- fmt.Errorf("client %d acquire: %w", i, err)
					return
				}
				if err := postJSON(hc, url+"/v1/locks/"+strings.ReplaceAll(name, "/", "%2F")+"/release", `{"token":"`+got.Token+`"}`, nil); err != nil {
					failures <- fmt.Errorf("client %d release: %w", i, err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	waitOps := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for ops.Load() < n {
			select {
			case err := <-failures:
				t.Fatal(err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d acquire+release pairs within 60s, want %d", ops.Load(), n)
			}
			time.Sleep(10 * time.Millisecond) // poll interval of a deadline-bounded wait
		}
	}
	waitOps(16 * 20)
	next, err := c.ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	newSN.Store(next.Cert.SerialNumber.String())
	if _, _, err := next.WriteFiles(c.dir, "server"); err != nil {
		t.Fatal(err)
	}
	serve.signal(syscall.SIGHUP)
	waitLog(t, serve, "TLS certificate reloaded")
	reloaded.Store(true)
	waitOps(ops.Load() + 16*20)
	close(stop)
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Errorf("during the rotation: %v", err)
	}
	mu.Lock()
	seenNew := serials[next.Cert.SerialNumber.String()]
	mu.Unlock()
	if seenNew == 0 || lateOld.Load() != 0 || len(serials) != 2 {
		t.Errorf("handshakes by serial %v: want the new %s seen, and none of the old after the reload (saw %d)", serials, next.Cert.SerialNumber, lateOld.Load())
	}
	t.Logf("%d acquire+release pairs, handshakes by certificate serial: %v", ops.Load(), serials)

	expired, err := c.ca.Issue(tlstest.Leaf{DNS: []string{"localhost"}, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	expired.WriteFiles(c.dir, "server")
	serve.signal(syscall.SIGHUP)
	waitLog(t, serve, "TLS certificate not reloaded; the previous one stays in force")
	if !strings.Contains(serve.stderr.String(), "expired at") {
		t.Errorf("the refused reload's log does not say the certificate expired:\n%s", serve.stderr.String())
	}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatalf("handshake after a refused reload: %v", err)
	}
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(next.Cert.SerialNumber) != 0 {
		t.Errorf("after a refused reload the server shows serial %s, want %s", got, next.Cert.SerialNumber)
	}
	conn.Close()
	serve.signal(sigterm)
	if code := serve.wait(); code != 0 {
		t.Errorf("dlock serve exited %d; stderr:\n%s", code, serve.stderr.String())
	}
}

// postJSON posts body and decodes a 200 reply into out; any other status
// is an error.
func postJSON(hc *http.Client, url, body string, out any) error {
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// TestOperationsOpenSSLRecipe runs the openssl block of docs/operations.md
// ("Making a CA and certificates with openssl") in a temporary directory,
// serves mutual TLS with its files, and acquires with its client
// certificate, whose URI SAN the auth file maps to a tenant.
func TestOperationsOpenSSLRecipe(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("openssl not found (CI=true)")
		}
		t.Skip("openssl not found")
	}
	doc, err := os.ReadFile("../../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "### Making a CA and certificates with openssl")
	_, block, ok2 := strings.Cut(after, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/operations.md has no sh block under ### Making a CA and certificates with openssl")
	}
	dir := t.TempDir()
	sh := exec.Command("sh", "-eu")
	sh.Dir, sh.Stdin = dir, strings.NewReader(block)
	sh.Env = append(os.Environ(), "PATH="+filepath.Dir(openssl)+":"+os.Getenv("PATH"))
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the openssl recipe: %v\n%s", err, out)
	}
	in := func(f string) string { return filepath.Join(dir, f) }
	auth := in("auth.json")
	os.WriteFile(auth, []byte(`{"tokens":[{"tenant":"billing","identity":"uri:spiffe://example.org/billing","prefixes":["billing/"],"access":"read-write"}]}`), 0o600)
	serve := startDlock(t, nil, "serve", "--addr", "127.0.0.1:0", "--tls-cert", in("tls.pem"), "--tls-key", in("tls-key.pem"),
		"--client-ca", in("ca.pem"), "--auth-file", auth)
	url := "https://" + serveAddr(t, serve)
	flags := []string{"--server", url, "--ca-file", in("ca.pem"), "--cert", in("billing.pem"), "--key", in("billing-key.pem")}
	if code, _, stderr := runDlock(t, nil, append(append([]string{"acquire"}, flags...), "billing/nightly")...); code != 0 {
		t.Errorf("dlock acquire with the recipe's certificates = %d; stderr %s", code, stderr)
	}
	if code, _, stderr := runDlock(t, nil, append(append([]string{"acquire"}, flags...), "other/x")...); code != runner.ExitUsage {
		t.Errorf("dlock acquire out of the billing scope = %d, want %d; stderr %s", code, runner.ExitUsage, stderr)
	}
	serve.signal(sigterm)
	serve.wait()
}

// TestServeTLSFlagErrors: the TLS flags of dlock serve in a combination
// that cannot work are usage errors naming the flags; unreadable or
// expired files stop it at start with exit 1.
func TestServeTLSFlagErrors(t *testing.T) {
	c := makeCerts(t, nil)
	expired, err := c.ca.Issue(tlstest.Leaf{DNS: []string{"localhost"}, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	oldCert, oldKey, err := expired.WriteFiles(c.dir, "expired")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  []string
		code int
		want string
	}{
		{[]string{"serve", "--tls-cert", c.cert}, nil, runner.ExitUsage, "--tls-cert and --tls-key go together"},
		{[]string{"serve"}, []string{"DLOCK_TLS_KEY=" + c.key}, runner.ExitUsage, "--tls-cert and --tls-key go together"},
		{[]string{"serve", "--client-ca", c.caFile}, nil, runner.ExitUsage, "--client-ca needs --tls-cert"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--tls-cert", oldCert, "--tls-key", oldKey}, nil, 1, "expired at"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--tls-cert", c.cert, "--tls-key", c.key, "--client-ca", c.cert + ".missing"}, nil, 1, "client CA"},
	} {
		code, _, stderr := mainResult(t, tc.env, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("dlock %s (env %v) = %d, stderr %q; want %d naming %q", strings.Join(tc.args, " "), tc.env, code, stderr, tc.code, tc.want)
		}
	}
}
