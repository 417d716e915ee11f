package dlock

import (
	"context"
	"runtime"
	"testing"
	"time"
)

type ctxKey struct{}

// TestAttemptContextSharesOneExpiry: the calls of a ctx that can be
// cancelled but has no deadline get ctx's values and a deadline grace from
// now; the calls of the same stretch share one expiry, so a call costs two
// small allocations and no timer of its own.
func TestAttemptContextSharesOneExpiry(t *testing.T) {
	var e expiries
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer cancel()
	const grace = time.Hour
	before := time.Now()
	actx, acancel := e.attemptContext(parent, grace)
	defer acancel()
	dl, ok := actx.Deadline()
	if !ok || dl.Before(before.Add(grace)) || dl.After(time.Now().Add(grace+grace/32)) {
		t.Fatalf("Deadline = %v, %v; want between %v and %v after now", dl, ok, grace, grace+grace/32)
	}
	if v := actx.Value(ctxKey{}); v != "v" {
		t.Errorf("Value = %v, want the parent's", v)
	}
	other, ocancel := e.attemptContext(parent, grace)
	defer ocancel()
	if other.Done() != actx.Done() {
		t.Error("two calls made together have Done channels of their own, want one shared expiry")
	}
	cancel() // the caller's ctx ends: the call is not cut short
	if actx.Err() != nil {
		t.Fatalf("Err after the parent was canceled = %v, want nil until the deadline", actx.Err())
	}
	allocs := testing.AllocsPerRun(1000, func() {
		c, cc := e.attemptContext(context.Background(), grace) // never ends: the call still does
		cc()
		_ = c
	})
	if allocs > 1 {
		t.Errorf("allocations for a ctx that never ends = %v, want at most 1 (no timer per call)", allocs)
	}
	if bg, _ := e.attemptContext(context.Background(), grace); bg.Done() == nil {
		t.Error("the call context of a ctx that never ends has no deadline, want grace from now")
	}
	live, lcancel := context.WithCancel(context.Background())
	defer lcancel()
	allocs = testing.AllocsPerRun(1000, func() {
		c, cc := e.attemptContext(live, grace)
		cc()
		_ = c
	})
	if allocs > 2 {
		t.Errorf("allocations per call context = %v, want at most 2 (no timer per call)", allocs)
	}
}

// TestExpiryContextEndsAtItsDeadline: the shared expiry ends every context
// that has it, with DeadlineExceeded, and not before its deadline.
func TestExpiryContextEndsAtItsDeadline(t *testing.T) {
	var e expiries
	const d = 30 * time.Millisecond
	ctx := e.context(context.Background(), d)
	dl, _ := ctx.Deadline()
	select {
	case <-ctx.Done():
		if time.Now().Before(dl) {
			t.Fatal("Done closed before the deadline")
		}
	default:
		if err := ctx.Err(); err != nil {
			t.Fatalf("Err before the deadline = %v, want nil", err)
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done still open 10 s after a 30 ms deadline")
	}
	if time.Now().Before(dl) {
		t.Error("Done closed before the deadline")
	}
	if err := ctx.Err(); err != context.DeadlineExceeded {
		t.Errorf("Err after the deadline = %v, want DeadlineExceeded", err)
	}
	later := e.context(context.Background(), d)
	if later.Done() == ctx.Done() {
		t.Error("a context asked for after the expiry passed got the ended expiry")
	}
	if err := later.Err(); err != nil {
		t.Errorf("new context's Err = %v, want nil", err)
	}
}

// TestExpiryContextEndsWhatDerivesFromIt: contexts derived from a call's
// context, directly or through a value, and context.AfterFunc, end with its
// expiry.
func TestExpiryContextEndsWhatDerivesFromIt(t *testing.T) {
	var e expiries
	ctx := e.context(context.WithValue(context.Background(), ctxKey{}, "v"), 30*time.Millisecond)
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	wrapped, wcancel := context.WithTimeout(context.WithValue(ctx, ctxKey{}, "w"), time.Hour)
	defer wcancel()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	for name, done := range map[string]<-chan struct{}{"child": child.Done(), "child of a value": wrapped.Done(), "AfterFunc": ran} {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not ended 10 s after a 30 ms deadline", name)
		}
	}
	if err := context.Cause(child); err != context.DeadlineExceeded {
		t.Errorf("Cause of the child = %v, want DeadlineExceeded", err)
	}
	if v := wrapped.Value(ctxKey{}); v != "w" {
		t.Errorf("Value through the wrapper = %v, want w", v)
	}
}

// TestExpiryContextCostsNoGoroutinePerDerivation: context.AfterFunc and
// contexts derived from a call's context register with the shared expiry
// (through its AfterFunc method, which package context documents using)
// instead of starting a goroutine each.
func TestExpiryContextCostsNoGoroutinePerDerivation(t *testing.T) {
	var e expiries
	ctx := e.context(context.Background(), time.Hour)
	before := runtime.NumGoroutine()
	const n = 200
	var stops []func() bool
	var cancels []context.CancelFunc
	for range n {
		stops = append(stops, context.AfterFunc(ctx, func() {}))
		_, cancel := context.WithCancel(ctx)
		cancels = append(cancels, cancel)
	}
	if grew := runtime.NumGoroutine() - before; grew >= n/2 {
		t.Errorf("%d AfterFuncs and %d derived contexts started %d goroutines, want none per derivation", n, n, grew)
	}
	for i := range stops {
		stops[i]()
		cancels[i]()
	}
}
