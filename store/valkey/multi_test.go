package valkey_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// scriptCalls returns how many EVALSHA and EVAL calls the server has run
// since its last CONFIG RESETSTAT, from INFO commandstats.
func scriptCalls(t *testing.T, srv *testredis.Server) int64 {
	t.Helper()
	var n int64
	for _, line := range strings.Split(mustDo(t, srv, "INFO", "commandstats"), "\n") {
		line = strings.TrimSpace(line)
		for _, c := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if v, ok := strings.CutPrefix(line, c); ok {
				v, _, _ = strings.Cut(v, ",")
				k, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats line %q: %v", line, err)
				}
				n += k
			}
		}
	}
	return n
}

// TestMultiOneScript: on one node a multi-lock of four names is taken,
// extended and released with one script each (INFO commandstats on a
// server of its own), and each name is an ordinary mutex key.
func TestMultiOneScript(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := testContext(t)
	l := newLocker(t, s, dlock.WithTTL(time.Minute))
	names := []string{"m-d", "m-a", "m-c", "m-b"}
	m := l.Multi(names)
	if !m.Atomic() {
		t.Fatalf("Multi(%q).Atomic() = false on one node", names)
	}
	// Load the scripts first: a NOSCRIPT reply costs a second call.
	warm, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	if err := warm.Extend(ctx, 0); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	mustDo(t, srv, "CONFIG", "RESETSTAT")
	ml, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	if n := scriptCalls(t, srv); n != 1 {
		t.Errorf("TryLock of %d names ran %d scripts, want 1", len(names), n)
	}
	for _, n := range names {
		if got := mustDo(t, srv, "GET", "lock:"+n); got != ml.Token() {
			t.Errorf("GET lock:%s = %q, want the multi-lock's token", n, got)
		}
	}
	mustDo(t, srv, "CONFIG", "RESETSTAT")
	if err := ml.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	if n := scriptCalls(t, srv); n != 1 {
		t.Errorf("Extend of %d names ran %d scripts, want 1", len(names), n)
	}
	for _, n := range names {
		if pttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", "lock:"+n)); pttl <= 60000 {
			t.Errorf("PTTL lock:%s after Extend(2m) = %d ms, want above a minute", n, pttl)
		}
	}
	mustDo(t, srv, "CONFIG", "RESETSTAT")
	if err := ml.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if n := scriptCalls(t, srv); n != 1 {
		t.Errorf("Release of %d names ran %d scripts, want 1", len(names), n)
	}
	for _, n := range names {
		if got := mustDo(t, srv, "EXISTS", "lock:"+n); got != "0" {
			t.Errorf("EXISTS lock:%s after Release = %s, want 0", n, got)
		}
	}
}

// TestMultiForeignHolder: a key set by another library's SET NX on one
// name refuses the whole multi-lock, naming that name; nothing is left
// held and the foreign key is untouched.
func TestMultiForeignHolder(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := testContext(t)
	if got := mustDo(t, srv, "SET", "lock:f-b", "tok", "NX", "PX", "10000"); got != "OK" {
		t.Fatalf("SET lock:f-b tok NX PX 10000 = %q, want OK", got)
	}
	l := newLocker(t, s)
	m := l.Multi([]string{"f-a", "f-b", "f-c"})
	if !m.Atomic() {
		t.Fatalf("Multi.Atomic() = false on one node")
	}
	_, err := m.TryLock(ctx)
	var le *dlock.LockedError
	if !errors.As(err, &le) || le.Name != "f-b" || le.Held != store.ModeMutex {
		t.Fatalf("TryLock over a foreign hold of f-b = %v; want a *LockedError naming f-b, Held mutex", err)
	}
	if le.RetryAfter <= 9*time.Second || le.RetryAfter > 10*time.Second {
		t.Errorf("RetryAfter = %v, want the foreign key's remaining PTTL, in (9s, 10s]", le.RetryAfter)
	}
	for _, k := range []string{"lock:f-a", "lock:f-c"} {
		if got := mustDo(t, srv, "EXISTS", k); got != "0" {
			t.Errorf("EXISTS %s after the refusal = %s, want 0 (nothing left held)", k, got)
		}
	}
	if got := mustDo(t, srv, "GET", "lock:f-b"); got != "tok" {
		t.Errorf("GET lock:f-b = %q, want the foreign token untouched", got)
	}
	mustDo(t, srv, "EVAL", foreignRelease, "1", "lock:f-b", "tok")
	ml, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the foreign release = %v", err)
	}
	ml.Release(ctx)
}
