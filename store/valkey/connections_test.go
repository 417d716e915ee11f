package valkey_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// TestCallsOnTheirClient: a Store made by Dial runs a call with a deadline
// on its client without client-side caching (no CLIENT TRACKING on that
// connection), and a call that can be cancelled but has no deadline on the
// tracking client, whose pipeline gives it up at once (see the package
// doc, "Connections").
func TestCallsOnTheirClient(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := testContext(t) // has a deadline
	req := dlock.Request{Name: "x", Token: "t1", TTL: time.Minute, Mode: dlock.ModeMutex}
	if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
		t.Fatalf("Acquire with a deadline = %+v, %v", g, err)
	}
	if conns := evalConns(t, srv); len(conns) == 0 || slices.Contains(conns, true) {
		t.Errorf("connections whose last command was a script, tracking or not: %v; want some, none tracking", conns)
	}

	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	req2 := dlock.Request{Name: "y", Token: "t2", TTL: time.Minute, Mode: dlock.ModeMutex}
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
		if cmd == "evalsha" || cmd == "eval" {
			conns = append(conns, strings.Contains(flags, "t"))
		}
	}
	return conns
}
