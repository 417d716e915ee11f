package prototest

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// CallsByCommand returns the calls per command (lower case, subcommands
// as "function|load") from srv's INFO commandstats.
func CallsByCommand(t *testing.T, srv *testredis.Server) map[string]int64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^cmdstat_([a-z|]+):calls=(\d+)`)
	out := make(map[string]int64)
	for _, m := range re.FindAllStringSubmatch(do(t, srv, "INFO", "commandstats"), -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		out[m[1]] = n
	}
	return out
}

// cycle acquires and releases req on s, the fence above *last (which it
// sets).
func cycle(t *testing.T, s store.Store, req store.Request, last *int64) {
	t.Helper()
	ctx := Context(t)
	g, err := s.Acquire(ctx, req)
	if err != nil || !g.Acquired || g.Fence <= *last {
		t.Fatalf("Acquire(%s) = %+v, %v; want a fence above %d", req.Name, g, err, *last)
	}
	*last = g.Fence
	if err := s.Release(ctx, req); err != nil {
		t.Fatalf("Release(%s) = %v", req.Name, err)
	}
}

// functionsLoadWhereMissing: the mutex's fast-path acquire and short
// release go by FCALL (issue 41), their libraries loaded by the first call
// that finds them missing, and again after the server lost them (FUNCTION
// FLUSH here; a restart without persistence alike); the fences keep rising
// through it. A second Store finds the libraries loaded.
func functionsLoadWhereMissing(t *testing.T, srv *testredis.Server, open func(*testing.T) store.Store) {
	ops, err := redisproto.ModeOps(store.ModeMutex, "valkey")
	if err != nil {
		t.Fatal(err)
	}
	do(t, srv, "FUNCTION", "FLUSH")
	s := open(t)
	req := store.Request{Name: "prototest-fn", Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex}
	var last int64
	for i, flush := range []bool{false, false, true, false} {
		if flush {
			do(t, srv, "FUNCTION", "FLUSH")
		}
		do(t, srv, "CONFIG", "RESETSTAT")
		cycle(t, s, req, &last)
		calls := CallsByCommand(t, srv)
		loads := int64(0)
		if i == 0 || flush {
			loads = 2 // the acquire's library and the release's
		}
		if calls["fcall"] != 2+loads || calls["function|load"] != loads || calls["evalsha"] != 0 || calls["eval"] != 0 {
			t.Errorf("round %d (flushed %v): fcall %d, function|load %d, evalsha %d, eval %d; want %d, %d, 0, 0",
				i, flush, calls["fcall"], calls["function|load"], calls["evalsha"], calls["eval"], 2+loads, loads)
		}
	}
	list := do(t, srv, "FUNCTION", "LIST")
	for _, sc := range []*redisproto.Script{ops.Acquire, ops.ShortRelease} {
		if fn := sc.Function(); fn == nil || !strings.Contains(list, fn.Name) {
			t.Errorf("%s: function form %+v not in FUNCTION LIST: %s", sc.Name, fn, list)
		}
	}

	// Another Store: no load, and each one's hold refuses the other.
	b := open(t)
	do(t, srv, "CONFIG", "RESETSTAT")
	other := req
	other.Token = "b"
	ctx := Context(t)
	if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	if g, err := b.Acquire(ctx, other); err != nil || g.Acquired {
		t.Fatalf("second Store: Acquire = %+v, %v; want refused", g, err)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	cycle(t, b, other, &last)
	// b, refused on the name, releases it by the full form (EVALSHA).
	if calls := CallsByCommand(t, srv); calls["function|load"] != 0 || calls["fcall"] != 4 || calls["evalsha"] != 1 {
		t.Errorf("function|load %d, fcall %d, evalsha %d; want 0, 4, 1 (%v)", calls["function|load"], calls["fcall"], calls["evalsha"], calls)
	}
}

// FunctionFallback checks that a Store open makes on a server at a URL
// runs every call by EVALSHA from the first answer that says the server has
// no FCALL (before Redis 7.0, or a proxy without it), no FUNCTION (no load),
// or that the user may not load functions (an ACL without FUNCTION); the
// locks work the same. It starts a server of its own for each.
func FunctionFallback(t *testing.T, open func(t *testing.T, url string) store.Store) {
	for _, tt := range []struct {
		name string
		args []string
		user bool // dial as a user without +function
	}{
		{"NoFCALL", []string{"--rename-command", "FCALL", ""}, false},
		{"NoFUNCTION", []string{"--rename-command", "FUNCTION", "dlock-test-function"}, false},
		{"ACL", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := testredis.Start(t, testredis.WithArgs(tt.args...))
			url := srv.URL()
			if tt.user {
				do(t, srv, "ACL", "SETUSER", "nofn", "on", ">pw", "~*", "&*", "+@all", "-function")
				url = "redis://nofn:pw@" + srv.Addr()
			}
			s := open(t, url)
			ctx := Context(t)
			req := store.Request{Name: "prototest-fallback", Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex}
			other := req
			other.Token = "b"
			var last int64
			for i := range 3 {
				cycle(t, s, req, &last)
				if i == 0 {
					// From here on: scripts only.
					do(t, srv, "CONFIG", "RESETSTAT")
				}
				if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
					t.Fatalf("round %d: Acquire = %+v, %v", i, g, err)
				}
				if g, err := s.Acquire(ctx, other); err != nil || g.Acquired {
					t.Fatalf("round %d: a second token's Acquire = %+v, %v; want refused", i, g, err)
				}
				if err := s.Release(ctx, req); err != nil {
					t.Fatalf("round %d: Release = %v", i, err)
				}
			}
			// 13 calls; the release's full form, sent from the first
			// refusal on, is new to the server once (EVAL).
			calls := CallsByCommand(t, srv)
			if calls["evalsha"] != 13 || calls["eval"] != 1 || calls["fcall"] != 0 || calls["function|load"] != 0 {
				t.Errorf("evalsha %d, eval %d, fcall %d, function|load %d; want 13, 1, 0, 0 (%v)",
					calls["evalsha"], calls["eval"], calls["fcall"], calls["function|load"], calls)
			}
		})
	}
}
