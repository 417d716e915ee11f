package valkey_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// TestCallsOnTheirClient: a Store made by Dial runs a call with a deadline
// on its client without client-side caching (no CLIENT TRACKING on that
// connection), and a call that can be cancelled but has no deadline on the
// tracking client, whose pipeline gives it up at once (see the package
// doc, "Connections").
func TestCallsOnTheirClient(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t) // has a deadline
	req := store.Request{Name: "x", Token: "t1", TTL: time.Minute, Mode: store.ModeMutex}
	if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
		t.Fatalf("Acquire with a deadline = %+v, %v", g, err)
	}
	if conns := evalConns(t, srv); len(conns) == 0 || slices.Contains(conns, true) {
		t.Errorf("connections whose last command was a script, tracking or not: %v; want some, none tracking", conns)
	}

	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	req2 := store.Request{Name: "y", Token: "t2", TTL: time.Minute, Mode: store.ModeMutex}
	if g, err := s.Acquire(cctx, req2); err != nil || !g.Acquired {
		t.Fatalf("Acquire with a cancellable ctx = %+v, %v", g, err)
	}
	if conns := evalConns(t, srv); !slices.Contains(conns, true) {
		t.Errorf("connections whose last command was a script, tracking or not: %v; want the tracking one among them", conns)
	}
}

// evalConns lists, for each connection whose last command was a script,
// whether it has CLIENT TRACKING on (flag t in CLIENT LIST).
func evalConns(t *testing.T, srv *testredis.Server) []bool {
	t.Helper()
	var conns []bool
	for line := range strings.Lines(mustDo(t, srv, "CLIENT", "LIST")) {
		var cmd, flags string
		for kv := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "cmd":
				cmd = v
			case "flags":
				flags = v
			}
		}
		if cmd == "evalsha" || cmd == "eval" || cmd == "fcall" {
			conns = append(conns, strings.Contains(flags, "t"))
		}
	}
	return conns
}

// TestCallsAfterServerRestart: after the server restarts, every connection
// valkey-go had open to it fails its next call (with EOF), and valkey-go
// keeps several; the Store sends such a call again, so the first acquire,
// release and extend after the restart succeed, on both clients (with a
// deadline and without one).
func TestCallsAfterServerRestart(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t) // has a deadline: the client without tracking
	cctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // no deadline: the tracking client's pipeline
	req := func(name string) store.Request {
		return store.Request{Name: name, Token: "t", TTL: time.Minute, Mode: store.ModeMutex}
	}
	// Open every connection of both clients (valkey-go picks one per call).
	for i := range 40 {
		for _, c := range []context.Context{ctx, cctx} {
			r := req("warm" + strconv.Itoa(i))
			if _, err := s.Acquire(c, r); err != nil {
				t.Fatal(err)
			}
			if err := s.Release(c, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv.Restart(t)
	for _, c := range []context.Context{ctx, cctx} {
		a, b := req("a"), req("b")
		for _, r := range []store.Request{a, b} {
			if g, err := s.Acquire(c, r); err != nil || !g.Acquired {
				t.Fatalf("Acquire(%s) after the restart (deadline %v) = %+v, %v (%T); want a grant", r.Name, c == ctx, g, err, errors.Unwrap(err))
			}
		}
		for i, err := range s.Extend(c, []store.Request{a, b}) {
			if err != nil {
				t.Errorf("Extend [%d] after the restart = %v", i, err)
			}
		}
		for _, r := range []store.Request{a, b} {
			if err := s.Release(c, r); err != nil {
				t.Errorf("Release(%s) after the restart = %v", r.Name, err)
			}
		}
		srv.Restart(t)
	}
}
