// Package prototest checks, on a real redis-server, what the scripts of
// package redisproto promise about the keys they leave, which storetest
// cannot see through the Store API: a foreign value in a name's main key is
// never overwritten or extended, and no key the scripts write is left without
// a TTL. store/valkey and store/goredis run [Run] on a Store of their own, so
// both clients are held to the same checks.
package prototest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/storetest"
)

// Conformance is the conformance of a store over package redisproto on one
// node: storetest's suite on Stores that open returns (its restart check
// restarts srv with all data lost), then [Run]'s checks of the keys the
// scripts leave. store/valkey and store/goredis run it, so both clients are
// held to the same suite.
func Conformance(t *testing.T, srv *testredis.Server, open func(*testing.T) store.Store) {
	storetest.Run(t, storetest.Harness{
		New:     open,
		Restart: func(t *testing.T) { srv.Restart(t) },
	})
	t.Run("ScriptKeys", func(t *testing.T) { Run(t, srv, open) })
}

// Run runs every check on Stores that open returns, each on srv (one node)
// with the default key prefix "lock:". The checks use lock names starting with "prototest-",
// and count the scripts srv runs (CONFIG RESETSTAT): nothing else may run
// scripts on srv meanwhile.
func Run(t *testing.T, srv *testredis.Server, open func(*testing.T) store.Store) {
	s := open(t)
	t.Run("ForeignMainKeyRefresh", func(t *testing.T) { foreignMainKeyRefresh(t, srv, s) })
	t.Run("ForeignMainKeyRelease", func(t *testing.T) { foreignMainKeyRelease(t, srv, s) })
	t.Run("MarkerToken", func(t *testing.T) { markerToken(t, srv, s) })
	t.Run("FairAuditTTL", func(t *testing.T) { fairAuditTTL(t, srv, s) })
	t.Run("FairHandoffTTL", func(t *testing.T) { fairHandoffTTL(t, srv, s) })
	t.Run("MultiOneScript", func(t *testing.T) { multiOneScript(t, srv, s) })
	t.Run("MultiForeignHolder", func(t *testing.T) { multiForeignHolder(t, srv, s) })
	t.Run("MutexShortRelease", func(t *testing.T) { mutexShortRelease(t, srv, open) })
	t.Run("HoldKeys", func(t *testing.T) { holdKeys(t, srv, s) })
	t.Run("HoldStaleRecord", func(t *testing.T) { holdStaleRecord(t, srv, s) })
	t.Run("HoldMinHoldKeys", func(t *testing.T) { holdMinHoldKeys(t, srv, s) })
	t.Run("HoldMaxHoldKeys", func(t *testing.T) { holdMaxHoldKeys(t, srv, s) })
	t.Run("FunctionsLoadWhereMissing", func(t *testing.T) { functionsLoadWhereMissing(t, srv, open) })
}

var layout = redisproto.NewLayout("lock:", 24*time.Hour)

// Context returns a context that ends with the test, or after a minute.
func Context(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func do(t *testing.T, srv *testredis.Server, args ...string) string {
	t.Helper()
	r, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("%v = %v", args, err)
	}
	return r
}

func pttl(t *testing.T, srv *testredis.Server, key string) int {
	t.Helper()
	n, err := strconv.Atoi(do(t, srv, "PTTL", key))
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return n
}

func grant(t *testing.T, s store.Store, req store.Request) store.Grant {
	t.Helper()
	g, err := s.Acquire(Context(t), req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire(%s, %v, %s) = %+v, %v; want a grant", req.Name, req.Mode, req.Token, g, err)
	}
	return g
}

// foreignMainKeyRefresh: a name held by a pattern whose main key a foreign
// client then takes (a DEL and its SET NX, or a plain SET) is the foreign
// client's. The holder's refresh, a repeated Acquire or an Extend, is refused
// as by a foreign mutex (Held ModeMutex, RetryAfter the foreign key's PTTL)
// or gets ErrNotHeld, and the foreign value and its TTL stay as they were.
func foreignMainKeyRefresh(t *testing.T, srv *testredis.Server, s store.Store) {
	modes := []store.Mode{store.ModeReentrant, store.ModeRead, store.ModeWrite, store.ModeFair, store.ModeSemaphore, store.ModeElection}
	for _, m := range modes {
		for _, op := range []string{"Acquire", "Extend"} {
			t.Run(m.String()+"/"+op, func(t *testing.T) {
				ctx := Context(t)
				name := "prototest-refresh-" + m.String() + "-" + op
				req := store.Request{Name: name, Token: "holder", TTL: time.Minute, Mode: m, Limit: 2}
				grant(t, s, req)
				main := layout.Key(name)
				do(t, srv, "SET", main, "foreign", "PX", "10000")
				switch op {
				case "Acquire":
					g, err := s.Acquire(ctx, req)
					if err != nil || g.Acquired || g.Held != store.ModeMutex ||
						g.RetryAfter <= 9*time.Second || g.RetryAfter > 10*time.Second {
						t.Errorf("repeated Acquire(%v) with a foreign main key = %+v, %v; want refused, Held mutex, RetryAfter in (9s, 10s]", m, g, err)
					}
				case "Extend":
					if err := s.Extend(ctx, []store.Request{req})[0]; !errors.Is(err, store.ErrNotHeld) {
						t.Errorf("Extend(%v) with a foreign main key = %v, want ErrNotHeld", m, err)
					}
				}
				if got := do(t, srv, "GET", main); got != "foreign" {
					t.Errorf("GET %s after the %v %s = %q, want the foreign value untouched", main, m, op, got)
				}
				if ms := pttl(t, srv, main); ms <= 0 || ms > 10000 {
					t.Errorf("PTTL %s after the %v %s = %d, want the foreign key's own, in (0, 10000]", main, m, op, ms)
				}
			})
		}
	}
}

// foreignMainKeyRelease: releasing one of several shared holders of a name
// whose main key a foreign client took leaves the foreign value alone.
func foreignMainKeyRelease(t *testing.T, srv *testredis.Server, s store.Store) {
	for _, m := range []store.Mode{store.ModeRead, store.ModeSemaphore} {
		t.Run(m.String(), func(t *testing.T) {
			ctx := Context(t)
			name := "prototest-release-" + m.String()
			a := store.Request{Name: name, Token: "a", TTL: time.Minute, Mode: m, Limit: 2}
			b := a
			b.Token = "b"
			grant(t, s, a)
			grant(t, s, b)
			main := layout.Key(name)
			do(t, srv, "SET", main, "foreign", "PX", "10000")
			if err := s.Release(ctx, a); err != nil {
				t.Errorf("Release(%v) of one of two holders = %v, want nil", m, err)
			}
			if got := do(t, srv, "GET", main); got != "foreign" {
				t.Errorf("GET %s after the release = %q, want the foreign value untouched", main, got)
			}
			if ms := pttl(t, srv, main); ms <= 0 || ms > 10000 {
				t.Errorf("PTTL %s after the release = %d, want the foreign key's own, in (0, 10000]", main, ms)
			}
		})
	}
}

// markerToken: a request whose token is shaped like a marker ("dlock:read")
// is refused before any script runs: a mutex acquire would make readers take
// its key for theirs, and a mutex release or extend compares the main key
// with the token, so it would delete or extend the readers' marker.
func markerToken(t *testing.T, srv *testredis.Server, s store.Store) {
	ctx := Context(t)
	name := "prototest-marker"
	main := layout.Key(name)
	reader := store.Request{Name: name, Token: "reader", TTL: time.Minute, Mode: store.ModeRead}
	grant(t, s, reader)
	bad := store.Request{Name: name, Token: "dlock:read", TTL: time.Second, Mode: store.ModeMutex}
	var inv *store.InvalidError
	if err := s.Release(ctx, bad); !errors.As(err, &inv) || inv.Field != "token" {
		t.Errorf("Release(mutex, token %q) = %v, want an *InvalidError naming token", bad.Token, err)
	}
	if err := s.Extend(ctx, []store.Request{bad})[0]; !errors.As(err, &inv) || inv.Field != "token" {
		t.Errorf("Extend(mutex, token %q) = %v, want an *InvalidError naming token", bad.Token, err)
	}
	if got := do(t, srv, "GET", main); got != "dlock:read" {
		t.Errorf("GET %s = %q, want the readers' marker untouched", main, got)
	}
	if ms := pttl(t, srv, main); ms <= 50000 || ms > 60000 {
		t.Errorf("PTTL %s = %d, want the reader's, in (50000, 60000]", main, ms)
	}
	s.Release(ctx, reader)
	for _, m := range []store.Mode{store.ModeMutex, store.ModeRead, store.ModeSemaphore} {
		req := store.Request{Name: name, Token: "dlock:semaphore:2", TTL: time.Minute, Mode: m, Limit: 2}
		if g, err := s.Acquire(ctx, req); !errors.As(err, &inv) || inv.Field != "token" {
			t.Errorf("Acquire(%v, token %q) = %+v, %v; want an *InvalidError naming token", m, req.Token, g, err)
		}
	}
	if got := do(t, srv, "EXISTS", main); got != "0" {
		t.Errorf("EXISTS %s = %s after refused acquires, want 0", main, got)
	}
}

// fairAuditTTL: every write to the fair lock's audit stream leaves it with a
// TTL, also a release's that recreates the stream (its day ran out while the
// lock was held, renewed).
func fairAuditTTL(t *testing.T, srv *testredis.Server, s store.Store) {
	ctx := Context(t)
	name := "prototest-audit"
	audit := layout.Aux(name, "fair:audit")
	holder := store.Request{Name: name, Token: "holder", TTL: time.Minute, Mode: store.ModeFair}
	waiter := store.Request{Name: name, Token: "waiter", TTL: time.Minute, Mode: store.ModeFair, Queue: true, QueueTTL: 10 * time.Second}
	check := func(what string) {
		t.Helper()
		if ms := pttl(t, srv, audit); ms <= 0 || ms > 86400000 {
			t.Errorf("PTTL of the audit stream after %s = %d, want in (0, 1 day]", what, ms)
		}
	}
	grant(t, s, holder)
	check("a grant")
	if g, err := s.Acquire(ctx, waiter); err != nil || g.Acquired {
		t.Fatalf("Acquire(waiter) = %+v, %v; want queued", g, err)
	}
	do(t, srv, "DEL", audit)
	if err := s.Release(ctx, holder); err != nil {
		t.Fatalf("Release(holder) = %v", err)
	}
	check("a release handing the lock over")
	do(t, srv, "DEL", audit)
	if err := s.Release(ctx, waiter); err != nil {
		t.Fatalf("Release(waiter) = %v", err)
	}
	check("a release")
	if n := do(t, srv, "XLEN", audit); n != "1" {
		t.Errorf("XLEN of the audit stream = %s, want 1 (the release)", n)
	}
}

// fairHandoffTTL: a release hands the fair lock to the head waiter with the
// lease TTL the waiter asked for, but no longer than until its queue
// deadline (the claim window: a waiter that died before claiming keeps the
// others waiting no longer than its place would have); a waiter whose
// handoff entry is missing (its key lost, or written by another version of
// the scripts) is handed a hold that ends at its queue deadline. The
// waiter's next Acquire claims its whole TTL.
func fairHandoffTTL(t *testing.T, srv *testredis.Server, s store.Store) {
	for _, c := range []struct {
		name     string
		entry    func(name string) // what happens to the waiter's entry
		queueTTL time.Duration     // the waiter's (its lease TTL is 20s)
		min, max int               // the handed-over hold's PTTL, ms
	}{
		{"Entry", func(string) {}, 30 * time.Second, 19000, 20000},
		{"EntryClaimWindow", func(string) {}, 5 * time.Second, 0, 5000},
		{"NoEntry", func(name string) { do(t, srv, "HDEL", layout.Aux(name, "fair:handoffs"), "t:waiter") }, 5 * time.Second, 0, 5000},
		{"NoHandoffs", func(name string) { do(t, srv, "DEL", layout.Aux(name, "fair:handoffs")) }, 5 * time.Second, 0, 5000},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := Context(t)
			name := "prototest-handoff-" + c.name
			holder := store.Request{Name: name, Token: "holder", TTL: time.Minute, Mode: store.ModeFair}
			waiter := store.Request{Name: name, Token: "waiter", TTL: 20 * time.Second, Mode: store.ModeFair, Queue: true, QueueTTL: c.queueTTL}
			grant(t, s, holder)
			if g, err := s.Acquire(ctx, waiter); err != nil || g.Acquired || g.Position != 0 {
				t.Fatalf("Acquire(waiter) = %+v, %v; want queued at 0", g, err)
			}
			c.entry(name)
			if err := s.Release(ctx, holder); err != nil {
				t.Fatalf("Release(holder) = %v", err)
			}
			h := layout.Aux(name, "fair")
			if got := do(t, srv, "GET", h); !strings.HasSuffix(got, "|waiter") {
				t.Fatalf("GET %s after the release = %q, want the waiter holding", h, got)
			}
			if ms := pttl(t, srv, h); ms <= c.min || ms > c.max {
				t.Errorf("PTTL of the handed-over hold = %d, want in (%d, %d]", ms, c.min, c.max)
			}
			if got := do(t, srv, "GET", layout.Key(name)); got != "dlock:fair" {
				t.Errorf("GET %s = %q, want dlock:fair", layout.Key(name), got)
			}
			if ms := pttl(t, srv, layout.Key(name)); ms <= c.min || ms > c.max {
				t.Errorf("PTTL of the main key = %d, want in (%d, %d]", ms, c.min, c.max)
			}
			// The waiter, back, learns that it holds and takes its own TTL.
			g, err := s.Acquire(ctx, waiter)
			if err != nil || !g.Acquired {
				t.Fatalf("Acquire(waiter) after the handoff = %+v, %v; want a grant", g, err)
			}
			if ms := pttl(t, srv, h); ms <= 19000 || ms > 20000 {
				t.Errorf("PTTL of the hold after the waiter's Acquire = %d, want in (19000, 20000]", ms)
			}
			s.Release(ctx, waiter)
		})
	}
}
