package goredis_test

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
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatalf("INFO commandstats = %v", err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
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

// TestMultiOneScript: through a *redis.Client a multi-lock is taken and
// released with one script each, and a foreign SET NX on one name refuses
// the whole multi-lock, leaving nothing held.
func TestMultiOneScript(t *testing.T) {
	srv := testredis.Start(t)
	ctx := testContext(t)
	s := open(t, srv.Addr())
	l := newLocker(t, s, dlock.WithTTL(time.Minute))
	names := []string{"g-a", "g-b", "g-c", "g-d"}
	m := l.Multi(names)
	if !m.Atomic() {
		t.Fatalf("Multi(%q).Atomic() = false on a *redis.Client", names)
	}
	warm, err := m.TryLock(ctx) // loads the scripts
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	warm.Release(ctx)
	for _, c := range [][]string{{"CONFIG", "RESETSTAT"}, {"SET", "lock:g-c", "tok", "NX", "PX", "10000"}} {
		if _, err := srv.Do(c...); err != nil {
			t.Fatalf("%q = %v", c, err)
		}
	}
	_, err = m.TryLock(ctx)
	var le *dlock.LockedError
	if !errors.As(err, &le) || le.Name != "g-c" || le.Held != store.ModeMutex {
		t.Errorf("TryLock over a foreign hold of g-c = %v; want a *LockedError naming g-c, Held mutex", err)
	}
	if n := scriptCalls(t, srv); n != 1 {
		t.Errorf("refused TryLock of %d names ran %d scripts, want 1", len(names), n)
	}
	for _, n := range []string{"g-a", "g-b", "g-d"} {
		if got, _ := srv.Do("EXISTS", "lock:"+n); got != "0" {
			t.Errorf("EXISTS lock:%s after the refusal = %s, want 0 (nothing left held)", n, got)
		}
	}
	if got, _ := srv.Do("GET", "lock:g-c"); got != "tok" {
		t.Errorf("GET lock:g-c = %q, want the foreign token untouched", got)
	}
	srv.Do("DEL", "lock:g-c")
	srv.Do("CONFIG", "RESETSTAT")
	ml, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	if err := ml.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if n := scriptCalls(t, srv); n != 2 {
		t.Errorf("TryLock and Release of %d names ran %d scripts, want 2", len(names), n)
	}
}
