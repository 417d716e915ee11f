//go:build unix

package cli

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store/valkey"
)

// TestMixedKindConflict: a name is one lock. While a read lock, a fair lock
// or semaphore permits (taken through the library) hold a name, dlock run
// and dlock acquire on it exit with the "locked" code and name the held
// mode.
func TestMixedKindConflict(t *testing.T) {
	srv := testredis.Start(t)
	env := []string{"DLOCK_REDIS_URL=" + srv.URL()}
	ctx := context.Background()
	st, err := valkey.Dial(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := dlock.New(st, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for _, tc := range []struct {
		held string
		take func(name string) (*dlock.Lease, error)
	}{
		{"read", func(name string) (*dlock.Lease, error) { return l.RWMutex(name).TryRLock(ctx) }},
		{"fair", func(name string) (*dlock.Lease, error) { return l.Fair(name).TryLock(ctx) }},
		{"semaphore", func(name string) (*dlock.Lease, error) { return l.Semaphore(name, 3).TryAcquire(ctx) }},
	} {
		t.Run(tc.held, func(t *testing.T) {
			name := uniqueName(t)
			lease, err := tc.take(name)
			if err != nil {
				t.Fatalf("%s lock on %q = %v", tc.held, name, err)
			}
			for _, args := range [][]string{{"run", name, "--", "echo", "ran"}, {"acquire", name}} {
				code, out, stderr := runDlock(t, env, args...)
				if code != runner.ExitLocked || strings.Contains(out, "ran") {
					t.Errorf("dlock %s while a %s hold has the name = %d, %q; want %d; stderr:\n%s", args[0], tc.held, code, out, runner.ExitLocked, stderr)
				}
				if !strings.Contains(stderr, "a "+tc.held+" hold") {
					t.Errorf("dlock %s stderr = %q, want it to name the %s hold", args[0], stderr, tc.held)
				}
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if code, _, stderr := runDlock(t, env, "run", name, "--", "true"); code != 0 {
				t.Errorf("dlock run after the %s hold's release = %d; stderr:\n%s", tc.held, code, stderr)
			}
		})
	}
}

// TestMixedKindConflictThroughServer: through --server, a shared hold taken
// over the HTTP API refuses dlock run with the "locked" code, naming the
// held mode the service reported.
func TestMixedKindConflictThroughServer(t *testing.T) {
	url := startServer(t, "")
	env := []string{"DLOCK_SERVER=" + url}
	name := uniqueName(t)
	resp, err := http.Post(url+"/v1/locks/"+name+"/acquire", "application/json", bytes.NewReader([]byte(`{"mode":"shared","ttlMs":60000}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("shared acquire = %d", resp.StatusCode)
	}
	code, _, stderr := runDlock(t, env, "run", name, "--", "echo", "ran")
	if code != runner.ExitLocked || !strings.Contains(stderr, "a read hold") {
		t.Errorf("dlock run --server over a shared hold = %d, stderr %q; want %d naming the read hold", code, stderr, runner.ExitLocked)
	}
}
