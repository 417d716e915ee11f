package redisproto

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// TestMutexCallsCarryWhatTheScriptsRead: each key and argument of a script
// call costs the server time, so a mutex acquire that neither queues nor
// records sends the lock key, the fence key and the slot's fence mark
// alone, and the floor and queue arguments only when it has them; an
// extend adds the hold's record and the waiters flag (read in the MGET
// that compares the token); a release on a name without known waiters
// sends the short form.
func TestMutexCallsCarryWhatTheScriptsRead(t *testing.T) {
	o, err := ModeOps(store.ModeMutex, "test")
	if err != nil {
		t.Fatal(err)
	}
	l := NewLayout("lock:", 24*time.Hour)
	// The fence key's TTL: the grant's and the retention's, in ms.
	fttl := func(ms int64) string { return strconv.FormatInt(ms+24*3600*1000, 10) }
	all := o.Keys(l, "a")
	if len(all) != 7 || all[6] != l.Mark("a") || all[5] != l.Aux("a", "hold") {
		t.Fatalf("Keys = %q, want 7, the hold's record and the slot's fence mark last", all)
	}
	few := []string{all[0], all[1], all[6]}
	req := store.Request{Name: "a", Token: "t", TTL: time.Second, Mode: store.ModeMutex}
	if k := o.AcquireKeys(l, req); !slices.Equal(k, few) {
		t.Errorf("AcquireKeys without queue = %q, want %q", k, few)
	}
	// Extend reads the hold's record in the MGET that compares the token
	// (one command, as GET was), and keeps the waiters flag with it.
	if k, want := o.ExtendKeys(l, "a"), []string{all[0], all[1], all[5], all[4], all[6]}; !slices.Equal(k, want) {
		t.Errorf("ExtendKeys = %q, want %q", k, want)
	}
	// A request with a record sends the full form, the record after the
	// queue arguments, and its TTL capped at its max hold.
	rec := req
	rec.Holder, rec.MinHold, rec.MaxHold = "me", 2*time.Second, 500*time.Millisecond
	if k := o.AcquireKeys(l, rec); !slices.Equal(k, all) {
		t.Errorf("AcquireKeys with a record = %q, want %q", k, all)
	}
	// The fast path runs the script without hold_lib; the full form with it.
	if o.AcquireScript(req) != o.Acquire || o.AcquireScript(rec) != o.FullAcquire || o.Acquire == o.FullAcquire {
		t.Errorf("AcquireScript: want Acquire without a record, FullAcquire (another script) with one")
	}
	if got, want := o.AcquireArgs(context.Background(), l, rec), []string{"t", "500", l.Retention, fttl(500), "", "", "0", "2000", "500", "me", ""}; !slices.Equal(got, want) {
		t.Errorf("AcquireArgs with a record = %q, want %q", got, want)
	}
	ctx := context.Background()
	keep := l.Retention
	if got, want := o.AcquireArgs(ctx, l, req), []string{"t", "1000", keep, fttl(1000)}; !slices.Equal(got, want) {
		t.Errorf("AcquireArgs = %q, want %q", got, want)
	}
	if got, want := o.AcquireArgs(WithFenceFloor(ctx, 42), l, req), []string{"t", "1000", keep, fttl(1000), "42"}; !slices.Equal(got, want) {
		t.Errorf("AcquireArgs with a floor = %q, want %q", got, want)
	}
	q := req
	q.Queue, q.QueueTTL = true, 3*time.Second
	if k := o.AcquireKeys(l, q); !slices.Equal(k, all) {
		t.Errorf("AcquireKeys with queue = %q, want all of %q", k, all)
	}
	if got, want := o.AcquireArgs(ctx, l, q), []string{"t", "1000", keep, fttl(1000), "", "1", "3000"}; !slices.Equal(got, want) {
		t.Errorf("AcquireArgs with queue = %q, want %q", got, want)
	}
	if got, want := o.Args(l, q), []string{"t", "1000", keep}; !slices.Equal(got, want) {
		t.Errorf("Args = %q, want %q", got, want)
	}
	// A release sends its short form until the name is contended.
	k, a, short, _ := o.ReleaseCall(l, req)
	if want := o.Keys(l, "a"); !short || !slices.Equal(k, []string{want[0], want[4]}) || !slices.Equal(a, []string{"t"}) {
		t.Errorf("ReleaseCall = %q, %q, %v; want the lock key and flag, the token, short", k, a, short)
	}
	l.Contend("a")
	if k, a, short, _ := o.ReleaseCall(l, req); short || !slices.Equal(k, all) || !slices.Equal(a, o.Args(l, req)) {
		t.Errorf("ReleaseCall when contended = %q, %q, %v; want Keys, Args", k, a, short)
	}
	if _, _, short, _ := o.ReleaseCall(l, store.Request{Name: "b", Token: "t", Mode: store.ModeMutex}); !short {
		t.Error("ReleaseCall of another name: not short")
	}
	// A name granted with a record takes the record's short form: the lock
	// key, the waiters flag and the record.
	l.Record("b")
	if k, a, short, rec := o.ReleaseCall(l, store.Request{Name: "b", Token: "t", Mode: store.ModeMutex}); !short || !rec ||
		!slices.Equal(k, []string{"lock:b", l.Aux("b", "waiters:flag"), l.Aux("b", "hold")}) || !slices.Equal(a, []string{"t"}) {
		t.Errorf("ReleaseCall of a recorded name = %q, %q, %v, %v; want the record's short form", k, a, short, rec)
	}
	// The other modes' scripts read every key on every call.
	rw, _ := ModeOps(store.ModeRead, "test")
	r := store.Request{Name: "c", Mode: store.ModeRead}
	if k := rw.AcquireKeys(l, r); !slices.Equal(k, rw.Keys(l, "c")) {
		t.Errorf("read AcquireKeys = %q, want Keys", k)
	}
	if k, _, short, _ := rw.ReleaseCall(l, r); short || !slices.Equal(k, rw.Keys(l, "c")) {
		t.Errorf("read ReleaseCall = %q, %v; want Keys", k, short)
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
