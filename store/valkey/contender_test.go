package valkey_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// TestLeastFencedLockRisesThroughAClockStepBack holds the benchmarks' least
// fenced lock (redisproto.LeastFencedAcquire, bench/'s raw-valkeygo-fenced)
// to a guarantee of dlock's it claims to keep: on a node that keeps its
// data, fences rise whatever the clock does (docs/safety.md, Claim 1). Its
// counter expires after the retention; a grant that finds none must still
// issue above every fence issued on the name before, after the node's
// clock stepped back by more than the retention. dlock's mutex, on the
// same node and steps, is the reference (its slot's fence mark).
func TestLeastFencedLockRisesThroughAClockStepBack(t *testing.T) {
	srv := testredis.Start(t, testredis.WithClockShim())
	const retention = time.Second
	s := dial(t, srv.URL(), valkey.WithFenceRetention(retention))

	// The least fenced lock, as the benchmarks call it: the lock key, the
	// name's counter and the node's mark; token, TTL and how long the
	// counter is kept.
	lockKey, counter, mark := "lf", "lf:fence", "bench:fenced-mark"
	least := func(tok string) int64 {
		t.Helper()
		r := mustDo(t, srv, "EVAL", redisproto.LeastFencedAcquire.Src, "3", lockKey, counter, mark,
			tok, "100", strconv.FormatInt(retention.Milliseconds(), 10))
		f, err := strconv.ParseInt(r, 10, 64)
		if err != nil || f <= 0 {
			t.Fatalf("least fenced acquire = %q, want a fence", r)
		}
		mustDo(t, srv, "DEL", lockKey) // the release
		return f
	}
	dlockFence := func(tok string) int64 {
		t.Helper()
		return grantOnce(t, s, "dl", tok)
	}
	first, dfirst := least("a"), dlockFence("a")
	awaitGoneKey(t, srv, counter)
	awaitGoneKey(t, srv, s.AuxKey("dl", "fence"))

	srv.StepClock(-10 * retention)
	if d := dlockFence("b"); d <= dfirst {
		t.Errorf("dlock: fence %d after %d on a node that kept its data, its clock stepped back %v", d, dfirst, 10*retention)
	}
	if f := least("b"); f <= first {
		t.Errorf("least fenced lock: fence %d after %d (%v below) on a node that kept its data, its clock stepped back %v past the retention; want above",
			f, first, time.Duration(first-f)*time.Microsecond, 10*retention)
	}
}

// grantOnce takes and releases mutex name with token tok on s, and returns
// the grant's fence.
func grantOnce(t *testing.T, s *valkey.Store, name, tok string) int64 {
	t.Helper()
	ctx := prototest.Context(t)
	req := store.Request{Name: name, Token: tok, TTL: 100 * time.Millisecond, Mode: store.ModeMutex}
	g, err := s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire(%s) = %+v, %v", name, g, err)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	return g.Fence
}

// awaitGoneKey polls until key has expired on srv.
func awaitGoneKey(t *testing.T, srv *testredis.Server, key string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for mustDo(t, srv, "EXISTS", key) != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("%s still there 15 s on (PTTL %s)", key, mustDo(t, srv, "PTTL", key))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
