package prototest

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

// scriptCalls returns how many EVALSHA, EVAL and FCALL calls srv has run
// since its last CONFIG RESETSTAT, from INFO commandstats.
func scriptCalls(t *testing.T, srv *testredis.Server) int64 {
	t.Helper()
	var n int64
	for _, line := range strings.Split(do(t, srv, "INFO", "commandstats"), "\n") {
		line = strings.TrimSpace(line)
		for _, c := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls=", "cmdstat_fcall:calls="} {
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

// NewLocker returns a Locker on s, closed when the test ends.
func NewLocker(t *testing.T, s store.Store, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l, err := dlock.New(s, opts...)
	if err != nil {
		t.Fatalf("dlock.New = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// multiOneScript: on one node a multi-lock of four names is taken, extended
// and released with one script each, and each name is an ordinary mutex
// key holding the multi-lock's token.
func multiOneScript(t *testing.T, srv *testredis.Server, s store.Store) {
	ctx := Context(t)
	names := []string{"prototest-m-d", "prototest-m-a", "prototest-m-c", "prototest-m-b"}
	m := NewLocker(t, s, dlock.WithTTL(time.Minute)).Multi(names)
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
	do(t, srv, "CONFIG", "RESETSTAT")
	ml, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	if n := scriptCalls(t, srv); n != 1 {
		t.Errorf("TryLock of %d names ran %d scripts, want 1", len(names), n)
	}
	for _, n := range names {
		if got := do(t, srv, "GET", layout.Key(n)); got != ml.Token() {
			t.Errorf("GET %s = %q, want the multi-lock's token", layout.Key(n), got)
		}
	}
	do(t, srv, "CONFIG", "RESETSTAT")
	if err := ml.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatalf("Extend = %v", err)
	}
	if n := scriptCalls(t, srv); n != 1 {
		t.Errorf("Extend of %d names ran %d scripts, want 1", len(names), n)
	}
	for _, n := range names {
		if ms := pttl(t, srv, layout.Key(n)); ms <= 60000 {
			t.Errorf("PTTL %s after Extend(2m) = %d ms, want above a minute", layout.Key(n), ms)
		}
	}
	do(t, srv, "CONFIG", "RESETSTAT")
	if err := ml.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if n := scriptCalls(t, srv); n != 1 {
		t.Errorf("Release of %d names ran %d scripts, want 1", len(names), n)
	}
	for _, n := range names {
		if got := do(t, srv, "EXISTS", layout.Key(n)); got != "0" {
			t.Errorf("EXISTS %s after Release = %s, want 0", layout.Key(n), got)
		}
	}
}

// foreignRelease is the compare-and-delete of other Redis lock libraries.
const foreignRelease = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// multiForeignHolder: a key set by another library's SET NX on one name
// refuses the whole multi-lock in one script, naming that name with the
// foreign key's remaining PTTL; nothing is left held and the foreign key is
// untouched.
func multiForeignHolder(t *testing.T, srv *testredis.Server, s store.Store) {
	ctx := Context(t)
	a, b, c := "prototest-f-a", "prototest-f-b", "prototest-f-c"
	m := NewLocker(t, s, dlock.WithTTL(time.Minute)).Multi([]string{a, b, c})
	warm, err := m.TryLock(ctx) // loads the script
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	warm.Release(ctx)
	if got := do(t, srv, "SET", layout.Key(b), "tok", "NX", "PX", "10000"); got != "OK" {
		t.Fatalf("SET %s tok NX PX 10000 = %q, want OK", layout.Key(b), got)
	}
	do(t, srv, "CONFIG", "RESETSTAT")
	_, err = m.TryLock(ctx)
	var le *dlock.LockedError
	if !errors.As(err, &le) || le.Name != b || le.Held != store.ModeMutex {
		t.Fatalf("TryLock over a foreign hold of %s = %v; want a *LockedError naming it, Held mutex", b, err)
	}
	if le.RetryAfter <= 9*time.Second || le.RetryAfter > 10*time.Second {
		t.Errorf("RetryAfter = %v, want the foreign key's remaining PTTL, in (9s, 10s]", le.RetryAfter)
	}
	if n := scriptCalls(t, srv); n != 1 {
		t.Errorf("refused TryLock of 3 names ran %d scripts, want 1", n)
	}
	for _, n := range []string{a, c} {
		if got := do(t, srv, "EXISTS", layout.Key(n)); got != "0" {
			t.Errorf("EXISTS %s after the refusal = %s, want 0 (nothing left held)", layout.Key(n), got)
		}
	}
	if got := do(t, srv, "GET", layout.Key(b)); got != "tok" {
		t.Errorf("GET %s = %q, want the foreign token untouched", layout.Key(b), got)
	}
	do(t, srv, "EVAL", foreignRelease, "1", layout.Key(b), "tok")
	ml, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the foreign release = %v", err)
	}
	ml.Release(ctx)
}
