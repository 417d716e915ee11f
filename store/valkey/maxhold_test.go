package valkey_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// TestMaxHold: on a real redis-server, an auto-renewed lease with a max
// hold asks for no more than the max hold, is never valid past its grant
// plus the max hold, ends with ErrMaxHold (its Context with that cause),
// and the key is gone afterwards.
func TestMaxHold(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	const maxHold = 2 * time.Second
	l := prototest.NewLocker(t, dial(t, srv.URL()), dlock.WithTTL(time.Minute), dlock.WithMaxHold(maxHold))

	// The acquire asks the store for min(TTL, max hold).
	lease, err := l.Mutex("capped").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := strconv.Atoi(mustDo(t, srv, "PTTL", "lock:capped")); ms <= 0 || ms > 2000 {
		t.Errorf("PTTL lock:capped = %d, want in (0, 2000]: the max hold, not the 1m TTL", ms)
	}
	lease.Release(ctx)

	// Renewed every 200ms up to the max hold, then lost.
	l2 := prototest.NewLocker(t, dial(t, srv.URL()), dlock.WithTTL(600*time.Millisecond), dlock.WithAutoRenew(), dlock.WithMaxHold(maxHold))
	lease, err = l2.Mutex("renewed").TryLock(ctx)
	got := time.Now() // the grant was asked for before this
	if err != nil {
		t.Fatal(err)
	}
	lctx := lease.Context(ctx)
	timeout := time.After(30 * time.Second)
	for done := false; !done; {
		// TTL() counts from a moment after this one: the validity it
		// reports must end by the grant plus the max hold.
		before := time.Now()
		if ttl := lease.TTL(); before.Add(ttl).After(got.Add(maxHold)) {
			t.Fatalf("lease valid until %v after its grant, past its max hold %v", before.Add(ttl).Sub(got), maxHold)
		}
		select {
		case <-lease.Done():
			done = true
		case <-timeout:
			t.Fatalf("auto-renewed lease with max hold %v still held after 30s", maxHold)
		case <-time.After(20 * time.Millisecond): // sampling period
		}
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, dlock.ErrMaxHold) {
		t.Errorf("Err() = %v, want ErrLeaseLost and ErrMaxHold", err)
	}
	<-lctx.Done()
	if cause := context.Cause(lctx); !errors.Is(cause, dlock.ErrMaxHold) {
		t.Errorf("Context cause = %v, want ErrMaxHold", cause)
	}
	deadline := time.Now().Add(30 * time.Second)
	for mustDo(t, srv, "EXISTS", "lock:renewed") != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("lock:renewed still exists 30s after the max hold")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}
