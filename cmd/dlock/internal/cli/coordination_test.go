//go:build unix

package cli

import (
	"strings"
	"syscall"
	"testing"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// The CLI drives each coordination-service store through its flag's env
// var: `dlock run` holds the lock for a child, a second run is refused,
// status shows it, and the lock is free again once the holder ends; `dlock
// elect` runs its command while it leads, a standby with --wait gives up
// while it does, and another candidate leads with a higher term once it
// ends.
func TestCoordinationStores(t *testing.T) {
	tests := []struct {
		name string
		env  func(t *testing.T) string
	}{
		{"postgres", func(t *testing.T) string { return "DLOCK_POSTGRES_URL=" + pgtest.Start(t).URL() }},
		{"etcd", func(t *testing.T) string { return "DLOCK_ETCD_ENDPOINTS=" + etcdtest.Start(t).Endpoint() }},
		{"zookeeper", func(t *testing.T) string { return "DLOCK_ZOOKEEPER_SERVERS=" + zktest.Start(t).Addr() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := []string{tt.env(t)}
			name := uniqueName(t)
			// A hold on ZooKeeper lives as long as the session of the process
			// that took it, so the lock is held by a running `dlock run`.
			holder := startDlock(t, env, "run", "--ttl", "20s", name, "--", "sh", "-c", "echo \"fence=$DLOCK_FENCE\"; exec sleep 30")
			if l := holder.line(); l == "fence=" || !strings.HasPrefix(l, "fence=") {
				t.Fatalf("the child under dlock run printed %q, want its fence", l)
			}
			if code, _, stderr := runDlock(t, env, "run", name, "--", "true"); code != runner.ExitLocked {
				t.Errorf("dlock run on a held lock = %d, want %d; stderr:\n%s", code, runner.ExitLocked, stderr)
			}
			if code, out, stderr := runDlock(t, env, "status", name); code != 0 || !strings.Contains(out, name) {
				t.Errorf("dlock status = %d, %q; stderr:\n%s", code, out, stderr)
			}
			holder.signal(syscall.SIGTERM)
			if code := holder.wait(); code != 128+int(syscall.SIGTERM) {
				t.Errorf("holder exited %d, want %d (its child's SIGTERM)", code, 128+int(syscall.SIGTERM))
			}
			if code, _, stderr := runDlock(t, env, "run", "--wait", "30s", name, "--", "true"); code != 0 {
				t.Errorf("dlock run on a released lock = %d, want the child's 0; stderr:\n%s", code, stderr)
			}

			ename := name + "-elect"
			leader := startDlock(t, env, "elect", "--ttl", "20s", ename, "--", "sh", "-c", electScript)
			first := nextStart(t, []*dlockProc{leader})
			if code, out, stderr := runDlock(t, env, "elect", "--wait", "200ms", ename, "--", "echo", "ran"); code != runner.ExitLocked || out != "" {
				t.Errorf("standby with --wait = %d, stdout %q; want %d without running; stderr:\n%s", code, out, runner.ExitLocked, stderr)
			}
			leader.stdin.Close() // the command ends: dlock resigns
			if code := leader.wait(); code != 0 {
				t.Errorf("leader exited %d, want its command's 0; stderr:\n%s", code, leader.stderr.String())
			}
			next := startDlock(t, env, "elect", "--wait", "30s", ename, "--", "sh", "-c", electScript)
			second := nextStart(t, []*dlockProc{next})
			if second.term <= first.term {
				t.Errorf("next leader's term %d, want > %d", second.term, first.term)
			}
			next.stdin.Close()
			next.wait()
		})
	}
}
