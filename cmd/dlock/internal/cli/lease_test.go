//go:build unix

package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// parseAssignments reads the KEY=VALUE lines dlock acquire prints.
func parseAssignments(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("dlock acquire printed %q, want KEY=VALUE lines", out)
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
	if code, _, _ := runDlock(t, env, "extend", "--token", wrong, name); code != runner.ExitLeaseLost {
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
