package dlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// The store shows who holds a lock, with the caller's data and the fence,
// per hold.
func TestHolderShownByState(t *testing.T) {
	s := memory.New()
	l := newLocker(t, s)
	ctx := context.Background()
	before := time.Now()
	ls, err := l.Mutex("shown", dlock.WithHolder(dlock.DefaultHolder()), dlock.WithHolderData("batch 12")).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.State(ctx, "shown")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Owners) != 1 {
		t.Fatalf("State.Owners = %v, want one", st.Owners)
	}
	h := st.Owners[0]
	if h.Owner != dlock.DefaultHolder() || h.Data != "batch 12" || h.Fence != ls.Fence() || h.Since.Before(before.Truncate(time.Millisecond)) || h.Since.After(time.Now()) {
		t.Errorf("State.Owners[0] = %+v, want owner %q, data, fence %d, since the grant", h, dlock.DefaultHolder(), ls.Fence())
	}
}

// A min hold keeps the name held after an early release, for every
// exclusive pattern that takes it, until grant + d, with the fence
// unchanged; then the name is free and the next fence is higher.
func TestMinHoldKeepsTheNameAfterRelease(t *testing.T) {
	kinds := []struct {
		name string
		take func(l *dlock.Locker, ctx context.Context, opts ...dlock.Option) (int64, func() error, error)
	}{
		{"mutex", func(l *dlock.Locker, ctx context.Context, opts ...dlock.Option) (int64, func() error, error) {
			ls, err := l.Mutex("job", opts...).TryLock(ctx)
			if err != nil {
				return 0, nil, err
			}
			return ls.Fence(), func() error { return ls.Release(ctx) }, nil
		}},
		{"fair", func(l *dlock.Locker, ctx context.Context, opts ...dlock.Option) (int64, func() error, error) {
			ls, err := l.Fair("job", opts...).Lock(ctx)
			if err != nil {
				return 0, nil, err
			}
			return ls.Fence(), func() error { return ls.Release(ctx) }, nil
		}},
		{"election", func(l *dlock.Locker, ctx context.Context, opts ...dlock.Option) (int64, func() error, error) {
			e := l.Election("job", opts...)
			ls, err := e.Campaign(ctx, "me")
			if err != nil {
				return 0, nil, err
			}
			return ls.Fence(), func() error { return e.Resign(ctx) }, nil
		}},
		{"multi", func(l *dlock.Locker, ctx context.Context, opts ...dlock.Option) (int64, func() error, error) {
			ml, err := l.Multi([]string{"job", "other"}, opts...).TryLock(ctx)
			if err != nil {
				return 0, nil, err
			}
			return ml.Fence("job"), func() error { return ml.Release(ctx) }, nil
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				s := memory.New()
				l := newLocker(t, s, dlock.WithTTL(time.Second))
				start := time.Now()
				fence, release, err := k.take(l, ctx, dlock.WithMinHold(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				if err := release(); err != nil {
					t.Fatalf("release before the min hold = %v, want nil", err)
				}
				time.Sleep(30 * time.Second) // past the TTL, within the min hold
				_, err = l.Mutex("job").TryLock(ctx)
				var le *dlock.LockedError
				if !errors.As(err, &le) {
					t.Fatalf("TryLock 30s after the release of a hold with a 1m min hold = %v, want ErrLocked", err)
				}
				if left := time.Until(start.Add(time.Minute)); le.RetryAfter <= 0 || le.RetryAfter > left {
					t.Errorf("RetryAfter = %v, want the rest of the min hold, at most %v", le.RetryAfter, left)
				}
				if st, _ := s.State(ctx, "job"); st.Holders != 1 || len(st.Owners) != 1 || st.Owners[0].Fence != fence {
					t.Errorf("State during the min hold: %+v, want one hold with fence %d", st, fence)
				}
				time.Sleep(time.Until(start.Add(time.Minute)))
				ls, err := l.Mutex("job").TryLock(ctx)
				if err != nil {
					t.Fatalf("TryLock at grant + min hold = %v, want the name free", err)
				}
				if ls.Fence() <= fence {
					t.Errorf("next fence %d, want above %d", ls.Fence(), fence)
				}
			})
		})
	}
}

// A holder that crashes is bounded by its TTL, min hold or not: the min
// hold keeps a name after a release, not past its lease's expiry.
func TestMinHoldDoesNotOutliveAnUnreleasedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New()
		l := newLocker(t, s, dlock.WithTTL(time.Second))
		crashed, err := l.Mutex("job", dlock.WithMinHold(time.Minute)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = crashed.Forget() // the holder dies: nothing releases or renews it
		time.Sleep(time.Second + time.Millisecond)
		if _, err := l.Mutex("job").TryLock(ctx); err != nil {
			t.Errorf("TryLock after the crashed holder's TTL = %v, want the name free (min holds bind releases, not expiry)", err)
		}
	})
}

// forget stands for a process that dies holding a lease: the Locker lets
// go of it without touching the store.
func forget(t *testing.T, ls *dlock.Lease) {
	t.Helper()
	if err := ls.Forget(); err != nil {
		t.Fatal(err)
	}
}

// Resume takes back a lease by name, token and mode: same fence, validity
// from the send to the TTL the store extended the hold to, auto-renewal
// when asked; a token that no longer holds gets ErrNotHeld.
func TestResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New()
		first := newLocker(t, s, dlock.WithTTL(2*time.Second))
		ls, err := first.Mutex("job").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tok, fence := ls.Token(), ls.Fence()
		forget(t, ls)
		time.Sleep(time.Second)

		restarted := newLocker(t, s, dlock.WithTTL(3*time.Second))
		sent := time.Now()
		got, err := restarted.Resume(ctx, dlock.Request{Name: "job", Token: tok, Mode: dlock.ModeMutex}, dlock.WithAutoRenew())
		if err != nil {
			t.Fatalf("Resume = %v", err)
		}
		if got.Fence() != fence || got.Token() != tok || got.Mode() != dlock.ModeMutex {
			t.Errorf("resumed lease fence %d token ok %v mode %v, want fence %d, the token, mutex", got.Fence(), got.Token() == tok, got.Mode(), fence)
		}
		if ttl := got.TTL(); ttl > 3*time.Second || ttl < 3*time.Second-32*time.Millisecond-time.Since(sent) {
			t.Errorf("resumed TTL() = %v, want 3s less the drift margin (32ms)", ttl)
		}
		time.Sleep(10 * time.Second) // auto-renewed meanwhile
		if err := got.Err(); err != nil {
			t.Fatalf("resumed auto-renewed lease lost: %v", err)
		}
		if _, err := restarted.Mutex("job").TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
			t.Errorf("TryLock while resumed and renewed = %v, want ErrLocked", err)
		}
		for _, bad := range []dlock.Request{
			{Name: "job", Token: "not-the-token-000000000000000000", Mode: dlock.ModeMutex},
			{Name: "job", Token: tok, Mode: dlock.ModeFair},
			{Name: "other", Token: tok, Mode: dlock.ModeMutex},
		} {
			if _, err := restarted.Resume(ctx, bad); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Resume(%s %s) = %v, want ErrNotHeld", bad.Mode, bad.Name, err)
			}
		}
		if err := got.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := restarted.Resume(ctx, dlock.Request{Name: "job", Token: tok, Mode: dlock.ModeMutex}); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Resume after Release = %v, want ErrNotHeld", err)
		}
	})
}

// A resumed lease keeps the hold's max hold: it ends at grant + d, not at
// d after the resume.
func TestResumeKeepsTheMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := memory.New()
		l := newLocker(t, s, dlock.WithTTL(time.Second))
		granted := time.Now()
		ls, err := l.Mutex("job", dlock.WithMaxHold(3*time.Second)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		forget(t, ls)
		time.Sleep(500 * time.Millisecond)
		got, err := l.Resume(ctx, dlock.Request{Name: "job", Token: ls.Token(), Mode: dlock.ModeMutex}, dlock.WithAutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		waitDone(t, got, 10*time.Second)
		if !errors.Is(got.Err(), dlock.ErrMaxHold) {
			t.Errorf("resumed lease ended with %v, want ErrMaxHold", got.Err())
		}
		if ended := time.Since(granted); ended > 3*time.Second {
			t.Errorf("resumed lease ended %v after the grant, past its 3s max hold", ended)
		}
	})
}

// ForceRelease ends every hold of a name (a min hold too), returns who
// held it, and the next grant's fence is higher; the forced holder's
// extension is refused, and this Locker's own lease on it ends at once.
func TestForceRelease(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	holder := newLocker(t, s)
	stuck, err := holder.Mutex("stuck", dlock.WithHolder("worker-9/31"), dlock.WithMinHold(time.Hour)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	operator := newLocker(t, s)
	ended, err := operator.ForceRelease(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	if len(ended) != 1 || ended[0].Owner != "worker-9/31" || ended[0].Fence != stuck.Fence() {
		t.Errorf("ForceRelease = %+v, want the one hold of worker-9/31 with fence %d", ended, stuck.Fence())
	}
	next, err := operator.Mutex("stuck").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after ForceRelease = %v, want the name free", err)
	}
	if next.Fence() <= stuck.Fence() {
		t.Errorf("fence after ForceRelease %d, want above the forced hold's %d", next.Fence(), stuck.Fence())
	}
	if err := stuck.Extend(ctx, 0); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("the forced holder's Extend = %v, want ErrLeaseLost", err)
	}
	// The operator's own lease is ended at once.
	if _, err := operator.ForceRelease(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-next.Done():
	default:
		t.Errorf("the Locker's own lease on a force-released name is still held")
	}
	if !errors.Is(next.Err(), dlock.ErrLeaseLost) {
		t.Errorf("Err() of the Locker's own force-released lease = %v, want ErrLeaseLost", next.Err())
	}
	if got, err := operator.ForceRelease(ctx, "stuck"); err != nil || len(got) != 0 {
		t.Errorf("ForceRelease of a free name = %v, %v; want none, nil", got, err)
	}
}
