package redisproto

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// TestMutexCallsCarryWhatTheScriptsRead: each key and argument of a script
// call costs the server time, so a mutex acquire that does not queue, and
// every extend, send the lock key and the fence counter alone, and an
// acquire sends the floor and queue arguments only when it has them.
func TestMutexCallsCarryWhatTheScriptsRead(t *testing.T) {
	o, err := ModeOps(dlock.ModeMutex, "test")
	if err != nil {
		t.Fatal(err)
	}
	l := NewLayout("lock:", 24*time.Hour)
	all := o.Keys(l, "a")
	if len(all) != 5 {
		t.Fatalf("Keys = %q, want 5", all)
	}
	req := dlock.Request{Name: "a", Token: "t", TTL: time.Second, Mode: dlock.ModeMutex}
	if k := o.AcquireKeys(l, req); !slices.Equal(k, all[:2]) {
		t.Errorf("AcquireKeys without queue = %q, want %q", k, all[:2])
	}
	if k := o.ExtendKeys(l, "a"); !slices.Equal(k, all[:2]) {
		t.Errorf("ExtendKeys = %q, want %q", k, all[:2])
	}
	ctx := context.Background()
	keep := l.Retention
	if got, want := o.AcquireArgs(ctx, l, req), []string{"t", "1000", keep, "0"}; !slices.Equal(got, want) {
		t.Errorf("AcquireArgs = %q, want %q", got, want)
	}
	// The name is seen now: "1".
	if got, want := o.AcquireArgs(WithFenceFloor(ctx, 42), l, req), []string{"t", "1000", keep, "1", "42"}; !slices.Equal(got, want) {
		t.Errorf("AcquireArgs with a floor = %q, want %q", got, want)
	}
	q := req
	q.Queue, q.QueueTTL = true, 3*time.Second
	if k := o.AcquireKeys(l, q); !slices.Equal(k, all) {
		t.Errorf("AcquireKeys with queue = %q, want all of %q", k, all)
	}
	if got, want := o.AcquireArgs(ctx, l, q), []string{"t", "1000", keep, "1", "", "1", "3000"}; !slices.Equal(got, want) {
		t.Errorf("AcquireArgs with queue = %q, want %q", got, want)
	}
	if got, want := o.Args(l, q), []string{"t", "1000", keep}; !slices.Equal(got, want) {
		t.Errorf("Args = %q, want %q", got, want)
	}
	// The other modes' scripts read every key on every call.
	rw, _ := ModeOps(dlock.ModeRead, "test")
	if k := rw.AcquireKeys(l, dlock.Request{Name: "a", Mode: dlock.ModeRead}); !slices.Equal(k, rw.Keys(l, "a")) {
		t.Errorf("read AcquireKeys = %q, want Keys", k)
	}
}

func TestGranted(t *testing.T) {
	if g, err := Granted(7); err != nil || !g.Acquired || g.Fence != 7 || g.Count != 1 {
		t.Errorf("Granted(7) = %+v, %v", g, err)
	}
	if _, err := Granted(0); err == nil {
		t.Error("Granted(0): no error")
	}
}
