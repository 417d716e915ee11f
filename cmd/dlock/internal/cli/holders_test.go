package cli

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// Issue 38 on the command line, through a dlock serve on the memory store:
// dlock run records its owner and data (status and list show them, with
// the hold's age), --min-hold keeps the name after the command exits, and
// dlock force-release ends the hold.

type ownerOut struct {
	Owner string `json:"owner"`
	Since int64  `json:"since"`
	AgeMs int64  `json:"ageMs"`
	Data  string `json:"data"`
	Fence int64  `json:"fence"`
}

func statusJSON(t *testing.T, env []string, name string) (held bool, owners []ownerOut) {
	t.Helper()
	code, out, stderr := runDlock(t, env, "status", "--json", name)
	if code != 0 {
		t.Fatalf("dlock status --json %s = %d; stderr %s", name, code, stderr)
	}
	var st struct {
		Held   bool       `json:"held"`
		Owners []ownerOut `json:"owners"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("dlock status --json: %v in %q", err, out)
	}
	return st.Held, st.Owners
}

// TestRunOwnerShownByStatusAndList: dlock run --owner --data records who
// holds; status (text and JSON) and list show it with the hold's age;
// without --owner the hold names HOSTNAME/PID of the dlock process.
func TestRunOwnerShownByStatusAndList(t *testing.T) {
	env := []string{"DLOCK_SERVER=" + startServer(t, "")}
	name := uniqueName(t)
	p := startDlock(t, env, "run", "--owner", "job-runner/1", "--data", "build 7", name, "--", "sh", "-c", holdScript)
	if l := p.line(); !strings.HasPrefix(l, "started ") {
		t.Fatalf("dlock run printed %q, want started", l)
	}
	held, owners := statusJSON(t, env, name)
	if !held || len(owners) != 1 || owners[0].Owner != "job-runner/1" || owners[0].Data != "build 7" || owners[0].Since == 0 {
		t.Errorf("status --json: held %v, owners %+v; want one hold of job-runner/1 with data \"build 7\" and its grant time", held, owners)
	}
	_, out, _ := runDlock(t, env, "status", name)
	if !strings.Contains(out, "\n  owner job-runner/1, held for ") || !strings.Contains(out, `data "build 7"`) {
		t.Errorf("dlock status = %q, want a line naming the owner, the hold's age and its data", out)
	}
	_, out, _ = runDlock(t, env, "list")
	if !strings.Contains(out, "OWNER") || !strings.Contains(out, "AGE") || !strings.Contains(out, "job-runner/1") {
		t.Errorf("dlock list = %q, want OWNER and AGE columns naming job-runner/1", out)
	}
	p.stdin.Close()
	if code := p.wait(); code != 0 {
		t.Fatalf("dlock run exited %d; stderr %s", code, p.stderr.String())
	}

	// Without --owner: HOSTNAME/PID of the dlock process.
	name = uniqueName(t) + "-default"
	p = startDlock(t, env, "run", name, "--", "sh", "-c", holdScript)
	if l := p.line(); !strings.HasPrefix(l, "started ") {
		t.Fatalf("dlock run printed %q, want started", l)
	}
	host, _ := os.Hostname()
	want := host + "/" + strconv.Itoa(p.cmd.Process.Pid)
	if _, owners := statusJSON(t, env, name); len(owners) != 1 || owners[0].Owner != want {
		t.Errorf("owners without --owner = %+v, want %s", owners, want)
	}
	p.stdin.Close()
	p.wait()
}

// TestRunMinHoldAndForceRelease: a command that exits at once under
// --min-hold leaves the name held (another run gets 75); dlock
// force-release ends that hold, printing its owner, and the next run gets
// the lock with a higher fence.
func TestRunMinHoldAndForceRelease(t *testing.T) {
	env := []string{"DLOCK_SERVER=" + startServer(t, "")}
	name := uniqueName(t)
	if code, _, stderr := runDlock(t, env, "run", "--min-hold", "5m", "--owner", "cron@web-1", name, "--", "true"); code != 0 {
		t.Fatalf("dlock run --min-hold = %d; stderr %s", code, stderr)
	}
	if code, _, _ := runDlock(t, env, "run", name, "--", "true"); code != runner.ExitLocked {
		t.Fatalf("dlock run within the min hold = %d, want %d", code, runner.ExitLocked)
	}
	_, owners := statusJSON(t, env, name)
	if len(owners) != 1 || owners[0].Owner != "cron@web-1" {
		t.Fatalf("owners within the min hold = %+v, want cron@web-1", owners)
	}
	code, out, stderr := runDlock(t, env, "force-release", name)
	if code != 0 || !strings.Contains(out, "force-released 1 hold(s)") || !strings.Contains(out, "owner cron@web-1") {
		t.Fatalf("dlock force-release = %d, %q (stderr %q); want 0 naming the ended hold of cron@web-1", code, out, stderr)
	}
	if held, _ := statusJSON(t, env, name); held {
		t.Errorf("held after force-release")
	}
	p := startDlock(t, env, "run", name, "--", "sh", "-c", `echo "$DLOCK_FENCE"`)
	fence, _ := strconv.ParseInt(p.line(), 10, 64)
	if code := p.wait(); code != 0 || fence <= owners[0].Fence {
		t.Errorf("dlock run after force-release = %d with fence %d, want 0 and a fence above the forced hold's %d", code, fence, owners[0].Fence)
	}
	code, out, _ = runDlock(t, env, "force-release", "--json", name)
	if code != 0 || strings.TrimSpace(out) != `{"name":"`+name+`","ended":[]}` {
		t.Errorf("dlock force-release --json of a free lock = %d, %q", code, out)
	}
}

// TestRunHoldRecordUsage: bad --owner, --data and --min-hold are usage
// errors naming the flag.
func TestRunHoldRecordUsage(t *testing.T) {
	env := []string{"DLOCK_SERVER=http://127.0.0.1:1"}
	for _, args := range [][]string{
		{"--min-hold", "-1s"},
		{"--min-hold", "10s", "--max-hold", "5s"},
		{"--data", strings.Repeat("d", 1025)},
		{"--owner", strings.Repeat("o", 257)},
	} {
		code, _, stderr := runDlock(t, env, append(append([]string{"run"}, args...), "x", "--", "true")...)
		if code != runner.ExitUsage || !strings.Contains(stderr, args[0]) {
			t.Errorf("dlock run %s = %d (stderr %q), want %d naming %s", args[0], code, stderr, runner.ExitUsage, args[0])
		}
	}
}

// TestForceReleaseOnRedis: on a Redis store, a foreign library's key
// (SET NX PX) shows as a hold of an unknown owner, and dlock force-release
// ends it (the way out that was redis-cli del); a dlock run's hold shows
// its owner.
func TestForceReleaseOnRedis(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	name := uniqueName(t)
	if _, err := srv.Do("SET", "lock:"+name, "foreign-token", "NX", "PX", "600000"); err != nil {
		t.Fatal(err)
	}
	_, out, _ := runDlock(t, env, "status", name)
	if !strings.Contains(out, "\n  owner unknown") {
		t.Errorf("dlock status of a foreign key = %q, want a hold of an unknown owner", out)
	}
	code, out, stderr := runDlock(t, env, "force-release", name)
	if code != 0 || !strings.Contains(out, "force-released 1 hold(s)") || !strings.Contains(out, "owner unknown") {
		t.Fatalf("dlock force-release of a foreign key = %d, %q (stderr %q)", code, out, stderr)
	}
	if v, err := srv.Do("EXISTS", "lock:"+name); err != nil || v != "0" {
		t.Errorf("EXISTS lock:%s after force-release = %q, %v; want 0", name, v, err)
	}
	p := startDlock(t, env, "run", "--owner", "nightly@db-2", name, "--", "sh", "-c", holdScript)
	if l := p.line(); !strings.HasPrefix(l, "started ") {
		t.Fatalf("dlock run printed %q, want started", l)
	}
	if _, owners := statusJSON(t, env, name); len(owners) != 1 || owners[0].Owner != "nightly@db-2" || owners[0].Since == 0 {
		t.Errorf("owners on Redis = %+v, want nightly@db-2 with its grant time", owners)
	}
	p.stdin.Close()
	p.wait()
}
