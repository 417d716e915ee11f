package valkey_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// The de facto protocol of redsync, bsm/redislock, node-redlock and
// redis-py's Lock: SET key token NX PX ttl to take, this script to give back.
const foreignRelease = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// TestInteropForeignHolderBlocksDlock: a key set with a raw SET NX PX is a
// held lock for dlock, with RetryAfter its remaining PTTL, and dlock never
// releases or extends it.
func TestInteropForeignHolderBlocksDlock(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	if got := mustDo(t, srv, "SET", "lock:x", "tok", "NX", "PX", "10000"); got != "OK" {
		t.Fatalf("SET lock:x tok NX PX 10000 = %q, want OK", got)
	}
	l := prototest.NewLocker(t, s)
	ls, err := l.Mutex("x").TryLock(ctx)
	var le *dlock.LockedError
	if !errors.As(err, &le) {
		t.Fatalf("TryLock(x) over a foreign hold = %v, %v; want a *LockedError", ls, err)
	}
	if le.RetryAfter <= 9*time.Second || le.RetryAfter > 10*time.Second {
		t.Errorf("TryLock(x) RetryAfter = %v, want the remaining PTTL, in (9s, 10s]", le.RetryAfter)
	}

	// A release or extend with another token leaves the foreign key alone.
	req := store.Request{Name: "x", Token: "not-tok", TTL: time.Minute, Mode: store.ModeMutex}
	if err := s.Release(ctx, req); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release(x) with another token = %v, want ErrNotHeld", err)
	}
	if errs := s.Extend(ctx, []store.Request{req}); !errors.Is(errs[0], store.ErrNotHeld) {
		t.Errorf("Extend(x) with another token = %v, want ErrNotHeld", errs[0])
	}
	if got := mustDo(t, srv, "GET", "lock:x"); got != "tok" {
		t.Errorf("GET lock:x = %q, want the foreign token %q untouched", got, "tok")
	}
	if pttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", "lock:x")); pttl <= 0 || pttl >= 10000 {
		t.Errorf("PTTL lock:x = %d, want in (0, 10000): not extended", pttl)
	}

	// Once the foreign holder releases by its protocol, dlock takes it.
	mustDo(t, srv, "EVAL", foreignRelease, "1", "lock:x", "tok")
	ls, err = l.Mutex("x").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(x) after the foreign release = %v", err)
	}
	ls.Release(ctx)
}

// TestInteropDlockBlocksForeign: a dlock lease is a plain key holding the
// token, so a raw SET NX fails and a foreign compare-and-delete with the
// lease's token works; dlock releases only its own token.
func TestInteropDlockBlocksForeign(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	l := prototest.NewLocker(t, s, dlock.WithTTL(10*time.Second))

	ls, err := l.Mutex("x").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(x) = %v", err)
	}
	if got, err := srv.Do("SET", "lock:x", "other", "NX", "PX", "10000"); err != nil || got != "" {
		t.Errorf("raw SET NX over a dlock lease = %q, %v; want a nil reply", got, err)
	}
	if got := mustDo(t, srv, "GET", "lock:x"); got != ls.Token() {
		t.Errorf("GET lock:x = %q, want the lease's token", got)
	}
	if typ := mustDo(t, srv, "TYPE", "lock:x"); typ != "string" {
		t.Errorf("TYPE lock:x = %q, want string", typ)
	}
	if got := mustDo(t, srv, "GET", "{lock:x}:fence"); got == "" {
		t.Errorf("GET {lock:x}:fence is empty, want the fence counter")
	}

	// The lease ran out and a foreign client took the key: dlock's release
	// must not delete the foreign hold.
	mustDo(t, srv, "SET", "lock:x", "foreign", "PX", "10000")
	if err := ls.Release(ctx); err == nil {
		t.Errorf("Release of a lease whose key another client holds = nil, want an error")
	}
	if got := mustDo(t, srv, "GET", "lock:x"); got != "foreign" {
		t.Errorf("GET lock:x after dlock's release = %q, want %q untouched", got, "foreign")
	}

	// A foreign compare-and-delete with dlock's token frees a dlock lease.
	mustDo(t, srv, "DEL", "lock:x")
	ls, err = l.Mutex("x").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock(x) = %v", err)
	}
	if got := mustDo(t, srv, "EVAL", foreignRelease, "1", "lock:x", ls.Token()); got != "1" {
		t.Errorf("foreign release script with the lease's token = %q, want 1", got)
	}
	ls.Release(ctx)
}

// interopModes are the patterns whose holds foreign libraries must see.
var interopModes = []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeWrite, store.ModeFair, store.ModeSemaphore}

func interopReq(name string, m store.Mode, token string) store.Request {
	return store.Request{Name: name, Token: token, TTL: 10 * time.Second, Mode: m, Owner: token, Limit: 2}
}

// TestInteropEveryPattern: whatever pattern holds a name, a foreign
// library's SET lock:<name> NX PX is refused for the hold's lifetime and
// succeeds once it is released; and a foreign key refuses every pattern
// (Held mutex, RetryAfter its PTTL) until the foreign holder deletes it.
func TestInteropEveryPattern(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	for _, m := range interopModes {
		t.Run(m.String()+"/BlocksForeign", func(t *testing.T) {
			name := "every-" + m.String()
			req := interopReq(name, m, "dlock-token")
			if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
				t.Fatalf("Acquire(%s, %v) = %+v, %v; want a grant", name, m, g, err)
			}
			if got := mustDo(t, srv, "SET", "lock:"+name, "foreign", "NX", "PX", "10000"); got == "OK" {
				t.Errorf("foreign SET lock:%s NX PX while a %v hold has the name = %q, want nil (refused)", name, m, got)
			}
			if pttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", "lock:"+name)); pttl <= 9000 || pttl > 10000 {
				t.Errorf("PTTL lock:%s = %d, want the hold's remaining time, in (9000, 10000]", name, pttl)
			}
			if err := s.Release(ctx, req); err != nil {
				t.Fatalf("Release = %v", err)
			}
			if got := mustDo(t, srv, "SET", "lock:"+name, "foreign", "NX", "PX", "10000"); got != "OK" {
				t.Errorf("foreign SET lock:%s NX PX after the %v hold's release = %q, want OK", name, m, got)
			}
		})
		t.Run(m.String()+"/BlockedByForeign", func(t *testing.T) {
			name := "foreign-" + m.String()
			mustDo(t, srv, "SET", "lock:"+name, "foreign", "NX", "PX", "10000")
			req := interopReq(name, m, "dlock-token")
			g, err := s.Acquire(ctx, req)
			if err != nil || g.Acquired {
				t.Fatalf("Acquire(%s, %v) over a foreign key = %+v, %v; want a refusal", name, m, g, err)
			}
			if g.Held != store.ModeMutex || g.RetryAfter <= 9*time.Second || g.RetryAfter > 10*time.Second {
				t.Errorf("refusal = %+v, want Held mutex and RetryAfter the key's PTTL, in (9s, 10s]", g)
			}
			if got := mustDo(t, srv, "GET", "lock:"+name); got != "foreign" {
				t.Errorf("GET lock:%s = %q, want the foreign token untouched", name, got)
			}
			mustDo(t, srv, "EVAL", foreignRelease, "1", "lock:"+name, "foreign")
			if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
				t.Fatalf("Acquire(%s, %v) after the foreign release = %+v, %v; want a grant", name, m, g, err)
			}
			if err := s.Release(ctx, req); err != nil {
				t.Errorf("Release = %v", err)
			}
		})
	}
}
