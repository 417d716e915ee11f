//go:build unix

package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/internal/testredis"
)

func TestRunOnRedlock(t *testing.T) {
	var urls []string
	var nodes []*testredis.Server
	for range 3 {
		n := testredis.Start(t)
		nodes = append(nodes, n)
		urls = append(urls, n.URL())
	}
	env := []string{"DLOCK_REDLOCK_URLS=" + strings.Join(urls, ",")}
	name := uniqueName(t)
	holder := startDlock(t, env, "run", name, "--", "sh", "-c", holdScript)
	if l := holder.line(); !strings.HasPrefix(l, "started ") {
		t.Fatalf("command printed %q", l)
	}
	// A majority of the nodes has the key (the grant needs no more).
	held := 0
	for _, n := range nodes {
		if v, err := n.Do("EXISTS", "lock:"+name); err == nil && v == "1" {
			held++
		}
	}
	if held < 2 {
		t.Errorf("lock:%s is on %d of 3 nodes, want at least 2", name, held)
	}
	if code, _, stderr := runDlock(t, env, "run", name, "--", "echo", "ran"); code != runner.ExitLocked {
		t.Errorf("second dlock run --redlock-urls = %d, want %d; stderr:\n%s", code, runner.ExitLocked, stderr)
	}
	// status and list see the lock as a majority holds it.
	code, out, stderr := runDlock(t, env, "status", "--json", name)
	var st stateJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || !st.Held || st.Holders != 1 || st.Fence <= 0 {
		t.Errorf("dlock status --json --redlock-urls = %d, %q (%v); want held by one, with a fence; stderr:\n%s", code, out, err, stderr)
	}
	if code, out, stderr := runDlock(t, env, "list"); code != 0 || !strings.Contains(out, name) {
		t.Errorf("dlock list --redlock-urls = %d, %q; want %s listed; stderr:\n%s", code, out, name, stderr)
	}
	// One node down: a majority is left, so a new lock is still granted.
	nodes[2].Kill()
	other := name + "-other"
	if code, out, stderr := runDlock(t, env, "run", other, "--", "echo", "ran"); code != 0 || out != "ran" {
		t.Errorf("dlock run with 2 of 3 nodes = %d, %q; want 0, ran; stderr:\n%s", code, out, stderr)
	}
	// Two nodes down: no quorum.
	nodes[1].Kill()
	if code, _, stderr := runDlock(t, env, "run", other, "--", "echo", "ran"); code != runner.ExitUnavailable || !strings.Contains(stderr, "quorum") {
		t.Errorf("dlock run with 1 of 3 nodes = %d, want %d and a message about the quorum; stderr:\n%s", code, runner.ExitUnavailable, stderr)
	}
	holder.stdin.Close()
	holder.wait()
}

func TestRedlockNeedsThreeNodes(t *testing.T) {
	srv := testredis.Start(t)
	code, _, stderr := runDlock(t, []string{"DLOCK_REDLOCK_URLS=" + srv.URL()}, "run", "x", "--", "true")
	if code != runner.ExitUsage || !strings.Contains(stderr, "odd number") {
		t.Errorf("dlock run --redlock-urls with one node = %d, stderr %q; want %d", code, stderr, runner.ExitUsage)
	}
}

// TestServeOnRedis starts the dlock binary's service on a Redis store and
// uses it with the CLI's --server.
func TestServeOnRedis(t *testing.T) {
	srv := testredis.Start(t)
	serve := startDlock(t, []string{"DLOCK_REDIS_URL=" + srv.URL(), "DLOCK_ADDR=127.0.0.1:0"}, "serve")
	addr := serveAddr(t, serve)
	name := uniqueName(t)
	env := []string{"DLOCK_SERVER=http://" + addr}
	code, out, stderr := runDlock(t, env, "run", name, "--", "sh", "-c", "echo $DLOCK_FENCE")
	if code != 0 || out == "" {
		t.Fatalf("dlock run --server = %d, %q; stderr:\n%s", code, out, stderr)
	}
	// The fence came from Redis: it is the lock's fence counter.
	if v, err := srv.Do("GET", "{lock:"+name+"}:fence"); err != nil || v != out {
		t.Errorf("GET {lock:%s}:fence = %q, %v; want the command's DLOCK_FENCE %s", name, v, err, out)
	}
	serve.signal(sigterm)
	if code := serve.wait(); code != 0 {
		t.Errorf("dlock serve exited %d after SIGTERM, want 0; stderr:\n%s", code, serve.stderr.String())
	}
}

func TestRunOnCluster(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	env := []string{"DLOCK_REDIS_URL=redis://" + strings.Join(c.Addrs(), ",")}
	// Names on several slots: {tag} names land where their tag hashes.
	for _, name := range []string{uniqueName(t) + "-a", uniqueName(t) + "-b", "{" + uniqueName(t) + "}:c"} {
		holder := startDlock(t, env, "run", name, "--", "sh", "-c", holdScript)
		if l := holder.line(); !strings.HasPrefix(l, "started ") {
			t.Fatalf("command printed %q", l)
		}
		if code, _, stderr := runDlock(t, env, "run", name, "--", "echo", "ran"); code != runner.ExitLocked {
			t.Errorf("second dlock run on %q = %d, want %d; stderr:\n%s", name, code, runner.ExitLocked, stderr)
		}
		code, out, stderr := runDlock(t, env, "status", name)
		if code != 0 || !strings.Contains(out, "held") {
			t.Errorf("dlock status %q on the cluster = %d, %q; stderr:\n%s", name, code, out, stderr)
		}
		holder.stdin.Close()
		if code := holder.wait(); code != 0 {
			t.Errorf("holder of %q exited %d; stderr:\n%s", name, code, holder.stderr.String())
		}
	}
	code, out, stderr := runDlock(t, env, "list")
	if code != 0 || out != "no locks held" {
		t.Errorf("dlock list on the cluster = %d, %q, want no locks; stderr:\n%s", code, out, stderr)
	}
}
