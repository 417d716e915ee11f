//go:build unix

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// parseAssignments reads the KEY=VALUE lines dlock acquire prints.
func parseAssignments(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		l, ok := strings.CutPrefix(l, "export ")
		k, v, ok2 := strings.Cut(l, "=")
		if !ok || !ok2 {
			t.Fatalf("dlock acquire printed %q, want export KEY=VALUE lines", out)
		}
		m[k] = v
	}
	return m
}

func TestAcquireExtendRelease(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)

	code, out, stderr := runDlock(t, env, "acquire", "--ttl", "1m", name)
	if code != 0 {
		t.Fatalf("dlock acquire = %d; stderr:\n%s", code, stderr)
	}
	lease := parseAssignments(t, out)
	token := lease["DLOCK_TOKEN"]
	if lease["DLOCK_NAME"] != name || len(token) != 32 || lease["DLOCK_FENCE"] == "" || lease["DLOCK_TTL_MS"] != "60000" {
		t.Fatalf("dlock acquire printed %q", out)
	}
	if ttl, _ := srv.Do("PTTL", "lock:"+name); ttl == "" || ttl[0] == '-' {
		t.Errorf("PTTL lock:%s = %q, want a TTL", name, ttl)
	}

	// Held: another acquire fails, even after waiting a little.
	code, _, stderr = runDlock(t, env, "acquire", "--wait", "200ms", name)
	if code != runner.ExitLocked {
		t.Errorf("second dlock acquire = %d, want %d; stderr:\n%s", code, runner.ExitLocked, stderr)
	}
	// The holder's token acquires again: same fence.
	code, out, stderr = runDlock(t, env, "acquire", "--json", "--token", token, name)
	var g grantJSON
	if err := json.Unmarshal([]byte(out), &g); code != 0 || err != nil || g.Token != token || g.Name != name {
		t.Fatalf("dlock acquire --token = %d, %q (%v); stderr:\n%s", code, out, err, stderr)
	}
	if got := g.Fence; lease["DLOCK_FENCE"] != jsonNumber(got) {
		t.Errorf("re-acquire by the holder gave fence %d, want the same %s", got, lease["DLOCK_FENCE"])
	}

	code, out, _ = runDlock(t, env, "status", name)
	if code != 0 || !strings.Contains(out, "held") || !strings.Contains(out, lease["DLOCK_FENCE"]) {
		t.Errorf("dlock status = %d, %q; want held with fence %s", code, out, lease["DLOCK_FENCE"])
	}

	if code, _, stderr := runDlock(t, env, "extend", "--ttl", "2m", "--token", token, name); code != 0 {
		t.Errorf("dlock extend = %d; stderr:\n%s", code, stderr)
	}
	wrong := strings.Repeat("0", 32)
	if code, _, _ := runDlock(t, env, "extend", "--ttl", "1m", "--token", wrong, name); code != runner.ExitLeaseLost {
		t.Errorf("dlock extend with another token = %d, want %d", code, runner.ExitLeaseLost)
	}
	if code, _, _ := runDlock(t, env, "release", "--token", wrong, name); code != runner.ExitLeaseLost {
		t.Errorf("dlock release with another token = %d, want %d", code, runner.ExitLeaseLost)
	}
	// The token comes from DLOCK_TOKEN too.
	if code, _, stderr := runDlock(t, append(env, "DLOCK_TOKEN="+token), "release", name); code != 0 {
		t.Errorf("dlock release = %d; stderr:\n%s", code, stderr)
	}
	if code, _, _ := runDlock(t, env, "release", "--token", token, name); code != runner.ExitLeaseLost {
		t.Errorf("second dlock release = %d, want %d", code, runner.ExitLeaseLost)
	}
	code, out, _ = runDlock(t, env, "status", "--json", name)
	var st stateJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Held {
		t.Errorf("dlock status --json after release = %d, %q, want free", code, out)
	}
	code, out, _ = runDlock(t, env, "list", "--json")
	if code != 0 || strings.Contains(out, name) {
		t.Errorf("dlock list --json after release = %d, %q; want %s gone", code, out, name)
	}
}

// TestExtendKeepsTheLeaseTTL: without --ttl, dlock extend renews a lease
// to its own TTL (DLOCK_TTL_MS as acquire printed it; with --server, the
// server's), not to a 30s default, and says it renewed it to that from now.
// A store that does not record the TTL needs one: a usage error.
func TestExtendKeepsTheLeaseTTL(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	code, out, stderr := runDlock(t, env, "acquire", "--ttl", "5m", name)
	if code != 0 {
		t.Fatalf("dlock acquire = %d; stderr:\n%s", code, stderr)
	}
	lease := parseAssignments(t, out)
	evaled := slices.Concat(env, []string{"DLOCK_TOKEN=" + lease["DLOCK_TOKEN"], "DLOCK_TTL_MS=" + lease["DLOCK_TTL_MS"]})
	code, out, stderr = runDlock(t, evaled, "extend", name)
	if want := name + ": renewed to 5m0s from now"; code != 0 || out != want {
		t.Errorf("dlock extend = %d, %q, want 0, %q; stderr:\n%s", code, out, want, stderr)
	}
	if ms, _ := srv.Do("PTTL", "lock:"+name); len(ms) < 6 { // at least 100000 ms
		t.Errorf("PTTL lock:%s after extend = %q ms, want about 300000", name, ms)
	}
	code, _, stderr = runDlock(t, append(env, "DLOCK_TOKEN="+lease["DLOCK_TOKEN"]), "extend", name)
	if code != 64 || !strings.Contains(stderr, "--ttl") {
		t.Errorf("dlock extend on redis without a TTL = %d, stderr %q; want 64 asking for --ttl", code, stderr)
	}

	url := startServer(t, "")
	senv := []string{"DLOCK_SERVER=" + url}
	code, out, stderr = runDlock(t, senv, "acquire", "--ttl", "5m", name)
	if code != 0 {
		t.Fatalf("dlock acquire --server = %d; stderr:\n%s", code, stderr)
	}
	lease = parseAssignments(t, out)
	code, out, stderr = runDlock(t, senv, "extend", "--token", lease["DLOCK_TOKEN"], name)
	// The server answers with the lease's validity: its TTL less the
	// allowance for clock drift.
	if re := regexp.MustCompile(`^` + name + `: renewed to (4m5[6-9]s|5m0s) from now$`); code != 0 || !re.MatchString(out) {
		t.Errorf("dlock extend --server = %d, %q, want 0, %v; stderr:\n%s", code, out, re, stderr)
	}
	code, out, _ = runDlock(t, senv, "status", "--json", name)
	var st stateJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.TTLMs < 60000 {
		t.Errorf("dlock status --json after extend = %d, %q, want a TTL of about 5m", code, out)
	}
}

// TestKeysWithoutExpiry: a lock key set without an expiry (by hand) is
// shown as never expiring, not as "0s left"; with --key-prefix= (every key
// of the database a would-be lock), dlock list shows what looks like a lock
// (keys with an expiry), not plain keys nor dlock's own auxiliary keys.
func TestKeysWithoutExpiry(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	if _, err := srv.Do("SET", "lock:stuck", "x"); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runDlock(t, env, "status", "stuck")
	// A key set by hand: a hold of an unknown owner.
	if want := "stuck: held (mutex), never expires (the key has no TTL)\n  owner unknown"; code != 0 || out != want {
		t.Errorf("dlock status stuck = %d, %q, want %q; stderr:\n%s", code, out, want, stderr)
	}
	code, out, _ = runDlock(t, env, "list")
	if code != 0 || !regexp.MustCompile(`(?m)^stuck +mutex +1 +never `).MatchString(out) {
		t.Errorf("dlock list = %d, %q, want stuck with TTL never", code, out)
	}

	for _, cmd := range [][]string{
		{"SET", "user:42", "alice"},
		{"HSET", "cache:page", "body", "x"},
		{"SET", "foreign-lock", "abc123", "PX", "60000"},
	} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := runDlock(t, env, "acquire", "--key-prefix=", "--ttl", "1m", "job"); code != 0 {
		t.Fatalf("dlock acquire --key-prefix= = %d; stderr:\n%s", code, stderr)
	}
	code, out, stderr = runDlock(t, env, "list", "--key-prefix=", "--json")
	var states []stateJSON
	if err := json.Unmarshal([]byte(out), &states); code != 0 || err != nil {
		t.Fatalf("dlock list --key-prefix= --json = %d, %q (%v); stderr:\n%s", code, out, err, stderr)
	}
	var names []string
	for _, st := range states {
		names = append(names, st.Name)
	}
	if want := []string{"foreign-lock", "job"}; !slices.Equal(names, want) {
		t.Errorf("dlock list --key-prefix= lists %q, want %q", names, want)
	}
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestStoreUnavailable(t *testing.T) {
	srv := testredis.Start(t)
	url := srv.URL()
	srv.Kill()
	for _, args := range [][]string{
		{"run", "x", "--", "true"},
		{"acquire", "x"},
		{"status", "x"},
		{"list"},
	} {
		if code, _, stderr := runDlock(t, []string{"DLOCK_REDIS_URL=" + url}, args...); code != runner.ExitUnavailable {
			t.Errorf("dlock %q with the store down = %d, want %d; stderr:\n%s", args, code, runner.ExitUnavailable, stderr)
		}
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	code, out, stderr := runDlock(t, env, "acquire", "--json", name)
	var first grantJSON
	if err := json.Unmarshal([]byte(out), &first); code != 0 || err != nil {
		t.Fatalf("dlock acquire = %d, %q; stderr:\n%s", code, out, stderr)
	}
	waiter := startDlock(t, env, "acquire", "--json", "--wait", "1m", name)
	waiter.stdin.Close()
	if code, _, stderr := runDlock(t, env, "release", "--token", first.Token, name); code != 0 {
		t.Fatalf("dlock release = %d; stderr:\n%s", code, stderr)
	}
	if code := waiter.wait(); code != 0 {
		t.Fatalf("waiting dlock acquire = %d; stderr:\n%s", code, waiter.stderr.String())
	}
	var second grantJSON
	if err := json.Unmarshal([]byte(waiter.stdout()), &second); err != nil || second.Fence <= first.Fence || second.Token == first.Token {
		t.Errorf("waiting dlock acquire printed %q (%v); want a new token and a fence above %d", waiter.stdout(), err, first.Fence)
	}
}

// acquireScript returns the shell script of the dlock acquire section of
// docs/cli.md: its one sh code block.
func acquireScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## dlock acquire\n")
	if !ok {
		t.Fatal("docs/cli.md has no section ## dlock acquire")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := strings.Split(section, "\n```sh\n")
	if len(blocks) != 2 {
		t.Fatalf("the dlock acquire section of docs/cli.md has %d sh blocks, want 1", len(blocks)-1)
	}
	script, _, ok := strings.Cut(blocks[1], "\n```")
	if !ok {
		t.Fatal("the sh block of the dlock acquire section of docs/cli.md does not end")
	}
	return script + "\n"
}

// TestAcquireScriptInDocs runs the script that docs/cli.md shows for dlock
// acquire, as written there, with bash against a dlock serve: while another
// holder has the lock it must stop with the exit code of acquire before its
// protected step runs; once the lock is free it runs both steps with the
// fence and releases the lock on exit. Only the server's address and the
// length of --wait are the test's (so that the held case ends in half a
// second rather than a minute).
func TestAcquireScriptInDocs(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	serve := startDlock(t, []string{"DLOCK_ADDR=127.0.0.1:0"}, "serve")
	url := "http://" + serveAddr(t, serve)
	t.Cleanup(func() {
		serve.signal(sigterm)
		serve.wait()
	})

	script := acquireScript(t)
	for old, repl := range map[string]string{
		"http://locks.internal:3009": url,
		"--wait 1m":                  "--wait 500ms",
	} {
		if n := strings.Count(script, old); n != 1 {
			t.Fatalf("the script in docs/cli.md has %q %d times, want once:\n%s", old, n, script)
		}
		script = strings.Replace(script, old, repl, 1)
	}
	dir := t.TempDir()
	// Each step records its arguments in stepN.ran.
	for _, step := range []string{"step1", "step2"} {
		body := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + step + ".ran\n"
		if err := os.WriteFile(filepath.Join(dir, step+".sh"), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "script.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	runScript := func() (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, bash, "script.sh")
		c.Dir = dir
		c.Env = baseEnv("PATH=" + filepath.Dir(dlockBin) + string(os.PathListSeparator) + os.Getenv("PATH"))
		out, err := c.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("bash script.sh: %v", err)
		}
		return c.ProcessState.ExitCode(), string(out)
	}
	ran := func(step string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(dir, step+".ran"))
		return string(b), err == nil
	}

	env := []string{"DLOCK_SERVER=" + url}
	code, out, stderr := runDlock(t, env, "acquire", "--ttl", "1m", "deploy")
	if code != 0 {
		t.Fatalf("dlock acquire = %d; stderr:\n%s", code, stderr)
	}
	holder := parseAssignments(t, out)

	// Held by another: the script stops before step1.
	if code, out := runScript(); code != runner.ExitLocked {
		t.Errorf("the script while the lock is held exited %d, want %d; output:\n%s", code, runner.ExitLocked, out)
	}
	for _, step := range []string{"step1", "step2"} {
		if args, ok := ran(step); ok {
			t.Errorf("the script while the lock is held ran ./%s.sh with %q", step, args)
		}
	}
	if code, _, stderr := runDlock(t, env, "release", "--token", holder["DLOCK_TOKEN"], "deploy"); code != 0 {
		t.Fatalf("the holder's dlock release after the script = %d, want 0 (still its lock); stderr:\n%s", code, stderr)
	}

	// Free: both steps run with the script's fence, and the trap releases.
	if code, out := runScript(); code != 0 {
		t.Fatalf("the script with the lock free exited %d, want 0; output:\n%s", code, out)
	}
	held, _ := strconv.ParseInt(holder["DLOCK_FENCE"], 10, 64)
	var fences []int64
	for _, step := range []string{"step1", "step2"} {
		args, _ := ran(step)
		a := strings.Split(strings.TrimSuffix(args, "\n"), "\n")
		var f int64
		if len(a) == 2 && a[0] == "--fence" {
			f, _ = strconv.ParseInt(a[1], 10, 64)
		}
		if f <= held {
			t.Errorf("./%s.sh ran with %q, want --fence and a fence above the earlier holder's %d", step, args, held)
		}
		fences = append(fences, f)
	}
	if fences[0] != fences[1] {
		t.Errorf("./step1.sh had fence %d and ./step2.sh %d, want the same", fences[0], fences[1])
	}
	code, out, _ = runDlock(t, env, "status", "--json", "deploy")
	var st stateJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Held {
		t.Errorf("dlock status --json after the script = %d, %q, want free (released by its trap)", code, out)
	}
}
