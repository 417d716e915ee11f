package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// TestRenewIntervalOverHalfTheTTL: WithRenewInterval's doc says the
// interval is at most TTL/2; a larger one is refused with an InvalidError
// naming "renewInterval", whatever the order of the options and whether
// the TTL is the Locker's or a lock's, and a lock refused so holds nothing.
// Exactly TTL/2 is allowed.
func TestRenewIntervalOverHalfTheTTL(t *testing.T) {
	isRenewInterval := func(err error) bool {
		var ie *dlock.InvalidError
		return errors.As(err, &ie) && ie.Field == "renewInterval" && errors.Is(err, dlock.ErrInvalid)
	}
	for _, tt := range []struct {
		name string
		opts []dlock.Option
	}{
		{"over half the default TTL", []dlock.Option{dlock.WithRenewInterval(16 * time.Second)}},
		{"interval then TTL", []dlock.Option{dlock.WithRenewInterval(time.Second), dlock.WithTTL(time.Second)}},
		{"TTL then interval", []dlock.Option{dlock.WithTTL(time.Second), dlock.WithRenewInterval(501 * time.Millisecond)}},
	} {
		if _, err := dlock.New(memory.New(), tt.opts...); !isRenewInterval(err) {
			t.Errorf("New(%s) = %v, want an InvalidError for renewInterval", tt.name, err)
		}
	}

	ctx := context.Background()
	s := memory.New()
	l := newLocker(t, s, dlock.WithRenewInterval(2*time.Second))
	// The Locker's interval against a lock's shorter TTL: refused when the
	// lock is taken, and nothing is held.
	short := l.Mutex("renew-short", dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
	for what, take := range map[string]func() (*dlock.Lease, error){
		"TryLock": func() (*dlock.Lease, error) { return short.TryLock(ctx) },
		"Lock":    func() (*dlock.Lease, error) { return short.Lock(ctx) },
		"Acquire": func() (*dlock.Lease, error) {
			return l.Acquire(ctx, dlock.Request{Name: "renew-short", TTL: 3 * time.Second}, false)
		},
	} {
		ls, err := take()
		if !isRenewInterval(err) {
			t.Errorf("%s with a 3s TTL under a 2s interval = %v, want an InvalidError for renewInterval", what, err)
		}
		if ls != nil {
			_ = ls.Release(ctx)
		}
	}
	if st, err := s.State(ctx, "renew-short"); err != nil || st.Holders != 0 {
		t.Errorf("State(renew-short) after the refusals = %+v, %v, want no holder", st, err)
	}

	// Exactly half the TTL is allowed.
	l2 := newLocker(t, memory.New(), dlock.WithTTL(time.Second), dlock.WithRenewInterval(500*time.Millisecond))
	ls, err := l2.Mutex("renew-half", dlock.WithAutoRenew()).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with the interval at TTL/2 = %v, want a lease", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}
