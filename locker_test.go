package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faultyStore wraps a real store and injects faults: stalled extends, lost
// acquire replies, and counts of calls.
type faultyStore struct {
	store.Store
	mu             sync.Mutex
	stallExtend    chan struct{} // when non-nil, Extend blocks until it is closed or ctx ends
	loseReplies    int           // the next n Acquire calls run but report an error
	failAcquires   int           // the next n Acquire calls fail without running
	extendCalls    int
	extendRequests int
}

var errReplyLost = errors.New("connection reset by peer")

func (f *faultyStore) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	f.mu.Lock()
	fail := f.failAcquires > 0
	if fail {
		f.failAcquires--
	}
	lose := !fail && f.loseReplies > 0
	if lose {
		f.loseReplies--
	}
	f.mu.Unlock()
	if fail {
		return store.Grant{}, errReplyLost
	}
	g, err := f.Store.Acquire(ctx, req)
	if lose {
		return store.Grant{}, errReplyLost
	}
	return g, err
}

func (f *faultyStore) Extend(ctx context.Context, reqs []dlock.Request) []error {
	f.mu.Lock()
	f.extendCalls++
	f.extendRequests += len(reqs)
	stall := f.stallExtend
	f.mu.Unlock()
	if stall != nil {
		select {
		case <-stall:
		case <-ctx.Done():
			errs := make([]error, len(reqs))
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		}
	}
	return f.Store.Extend(ctx, reqs)
}

func newLocker(t *testing.T, s store.Store, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l, err := dlock.New(s, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name  string
		opt   dlock.Option
		field string
	}{
		{"ttl too short", dlock.WithTTL(time.Millisecond), "ttl"},
		{"ttl too long", dlock.WithTTL(48 * time.Hour), "ttl"},
		{"backoff inverted", dlock.WithBackoff(time.Second, time.Millisecond), "backoff"},
		{"drift negative", dlock.WithDriftFactor(-1), "driftFactor"},
		{"renew zero", dlock.WithRenewInterval(0), "renewInterval"},
		{"owner empty", dlock.WithOwner(""), "owner"},
		{"max hold too short", dlock.WithMaxHold(time.Millisecond), "maxHold"},
		{"max hold negative", dlock.WithMaxHold(-time.Second), "maxHold"},
		{"max hold too long", dlock.WithMaxHold(dlock.MaxHold + 1), "maxHold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dlock.New(memory.New(), tt.opt)
			var ie *dlock.InvalidError
			if !errors.As(err, &ie) || ie.Field != tt.field {
				t.Errorf("New(%s) = %v, want InvalidError for %q", tt.name, err, tt.field)
			}
		})
	}
	if _, err := dlock.New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New(nil) = %v, want ErrInvalid", err)
	}
}

func TestTryLockRejectsBadNames(t *testing.T) {
	l := newLocker(t, memory.New())
	for _, name := range []string{"", string(make([]byte, 257)), "a\x00b", "a\nb", "\xff\xfe"} {
		_, err := l.Mutex(name).TryLock(context.Background())
		var ie *dlock.InvalidError
		if !errors.As(err, &ie) || ie.Field != "name" {
			t.Errorf("TryLock(%q) = %v, want InvalidError for name", name, err)
		}
	}
}

func TestAutoRenewOutlivesManyTTLs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := newLocker(t, memory.New(), dlock.WithTTL(time.Second), dlock.WithAutoRenew())
		lease, err := l.Mutex("renewed").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case <-lease.Done():
			t.Fatalf("auto-renewed lease ended after 10 TTLs: %v", lease.Err())
		default:
		}
		if _, err := l.Mutex("renewed").TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
			t.Errorf("TryLock on a renewed lock = %v, want ErrLocked", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Errorf("Release = %v", err)
		}
	})
}

func TestLeaseWithoutRenewalEndsAtLocalValidity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := newLocker(t, memory.New(), dlock.WithTTL(time.Second))
		start := time.Now()
		lease, err := l.Mutex("lapse").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-lease.Done()
		got := time.Since(start)
		want := time.Second - 12*time.Millisecond // TTL - (0.01*TTL + 2ms)
		if got != want {
			t.Errorf("lease ended after %v, want %v", got, want)
		}
		if !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
			t.Errorf("Err() = %v, want ErrLeaseLost", lease.Err())
		}
	})
}

// TestUnrenewedLeaseEndIsNotAWarning: a lease nothing renews (a /v1 lease
// of dlock serve, a TryLock without WithAutoRenew) that simply runs out is
// logged at INFO, not as a WARN "lease lost".
func TestUnrenewedLeaseEndIsNotAWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		l := newLocker(t, memory.New(), dlock.WithTTL(time.Second), dlock.WithLogger(log))
		lease, err := l.Mutex("lapse").TryLock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		<-lease.Done()
		synctest.Wait()
		if out := buf.String(); !strings.Contains(out, `level=INFO msg="dlock: lease ended unrenewed"`) || strings.Contains(out, "WARN") {
			t.Errorf("log = %q, want an INFO line and no WARN", out)
		}
	})
}

// A renewal that cannot be confirmed must end the lease locally before the
// store's copy expires, so that no one else can hold it while we still think
// we do.
func TestLeaseLostBeforeStoreExpiryWhenRenewalStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fs := &faultyStore{Store: memory.New(), stallExtend: make(chan struct{})}
		l := newLocker(t, fs, dlock.WithTTL(time.Second), dlock.WithAutoRenew())
		start := time.Now()
		lease, err := l.Mutex("stalled").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-lease.Done()
		// The store's copy would only expire at start+TTL: nobody else
		// could have held the lock yet.
		if got := time.Since(start); got >= time.Second {
			t.Errorf("lease declared lost after %v, want before the store's TTL of 1s", got)
		}
		if !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
			t.Errorf("Err() = %v, want ErrLeaseLost", lease.Err())
		}
		close(fs.stallExtend)
	})
}

func TestRenewalsArePipelined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fs := &faultyStore{Store: memory.New()}
		l := newLocker(t, fs, dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
		const n = 200
		for i := range n {
			if _, err := l.Mutex("p" + string(rune('A'+i%26)) + string(rune('a'+i/26))).TryLock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(1100 * time.Millisecond) // one renew interval (TTL/3) and a bit
		synctest.Wait()
		fs.mu.Lock()
		calls, reqs := fs.extendCalls, fs.extendRequests
		fs.mu.Unlock()
		if reqs != n || calls != 1 {
			t.Errorf("after one interval: %d Extend calls carrying %d renewals, want 1 call carrying %d", calls, reqs, n)
		}
	})
}

func TestRefusedRenewalLosesLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memory.New()
		l := newLocker(t, mem, dlock.WithTTL(time.Second), dlock.WithAutoRenew())
		lease, err := l.Mutex("stolen").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mem.Release(ctx, dlock.Request{Name: "stolen", Token: lease.Token()})
		start := time.Now()
		<-lease.Done()
		if got := time.Since(start); got > time.Second/3 {
			t.Errorf("loss noticed after %v, want within one renew interval", got)
		}
		if !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
			t.Errorf("Err() = %v, want ErrLeaseLost", lease.Err())
		}
		if err := lease.Release(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("Release after loss = %v, want ErrLeaseLost", err)
		}
	})
}

func TestLostAcquireReplyIsRecheckedByToken(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	fs := &faultyStore{Store: mem, loseReplies: 1}
	l := newLocker(t, fs)
	lease, err := l.Mutex("ambiguous").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after a lost reply = %v, want the lease", err)
	}
	st, _ := mem.State(ctx, "ambiguous")
	if st.Fence != lease.Fence() || st.Holders != 1 {
		t.Errorf("store state %+v, lease fence %d: want one holder with the lease's fence", st, lease.Fence())
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}

func TestUnresolvedAcquireLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	// The first call takes the lock but its reply is lost; the re-check fails.
	fs := &faultyStore{Store: mem, loseReplies: 1}
	fs.failAcquires = 0
	l := newLocker(t, &secondFails{faultyStore: fs})
	_, err := l.Mutex("ghost").TryLock(ctx)
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryLock = %v, want ErrUnavailable", err)
	}
	if st, _ := mem.State(ctx, "ghost"); st.Holders != 0 {
		t.Errorf("store state %+v after an unresolved acquire, want no holder", st)
	}
}

// secondFails lets the first Acquire through (with its reply lost by the
// inner faultyStore) and fails every later one.
type secondFails struct {
	*faultyStore
	n atomic.Int32
}

func (s *secondFails) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	if s.n.Add(1) > 1 {
		return store.Grant{}, errReplyLost
	}
	return s.faultyStore.Acquire(ctx, req)
}

func TestLockCancelledReportsBothCauses(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	l := newLocker(t, mem)
	holder, err := l.Mutex("busy").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = l.Mutex("busy").Lock(wctx)
	if !errors.Is(err, dlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with expiring ctx = %v, want ErrLocked and DeadlineExceeded", err)
	}
	var le *dlock.LockedError
	if !errors.As(err, &le) || le.RetryAfter <= 0 {
		t.Errorf("Lock error %v, want a LockedError with RetryAfter", err)
	}
	if st, _ := mem.State(ctx, "busy"); st.Holders != 1 || st.Fence != holder.Fence() {
		t.Errorf("state after a cancelled wait = %+v, want only the holder", st)
	}
}

func TestDoCancelsFnWhenLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memory.New()
		l := newLocker(t, mem, dlock.WithTTL(time.Second))
		err := l.Do(ctx, "job", func(ctx context.Context) error {
			lease := dlock.LeaseFromContext(ctx, "job")
			mem.Release(ctx, dlock.Request{Name: "job", Token: lease.Token()})
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), dlock.ErrLeaseLost) {
				t.Errorf("fn ctx cause = %v, want ErrLeaseLost", context.Cause(ctx))
			}
			return ctx.Err()
		})
		if !errors.Is(err, dlock.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
			t.Errorf("Do = %v, want ErrLeaseLost joined with fn's error", err)
		}
	})
}

func TestDoReleasesAfterFn(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	l := newLocker(t, mem)
	want := errors.New("fn failed")
	if err := l.Do(ctx, "once", func(context.Context) error { return want }); err != want {
		t.Errorf("Do = %v, want fn's error", err)
	}
	if st, _ := mem.State(ctx, "once"); st.Holders != 0 {
		t.Errorf("state after Do = %+v, want released", st)
	}
}

func TestCloseReleasesLeases(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	l, err := dlock.New(mem, dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Mutex("closing").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	<-lease.Done()
	if !errors.Is(lease.Err(), dlock.ErrClosed) || !errors.Is(lease.Err(), dlock.ErrLeaseLost) {
		t.Errorf("Err after Close = %v, want ErrLeaseLost and ErrClosed", lease.Err())
	}
	if st, _ := mem.State(ctx, "closing"); st.Holders != 0 {
		t.Errorf("state after Close = %+v, want released", st)
	}
	if _, err := l.Mutex("closing").TryLock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close = %v, want ErrClosed", err)
	}
}

func TestExtendUpdatesValidity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := newLocker(t, memory.New(), dlock.WithTTL(time.Second))
		lease, _ := l.Mutex("ext").TryLock(ctx)
		time.Sleep(500 * time.Millisecond)
		if err := lease.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if got, want := lease.TTL(), 5*time.Second-52*time.Millisecond; got != want {
			t.Errorf("TTL after Extend = %v, want %v", got, want)
		}
		if err := lease.Extend(ctx, time.Millisecond); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Extend(1ms) = %v, want ErrInvalid", err)
		}
		lease.Release(ctx)
		if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("second Release = %v, want ErrNotHeld", err)
		}
	})
}

func TestObserverSeesLifecycle(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var kinds []dlock.EventKind
	l := newLocker(t, memory.New(), dlock.WithObserver(func(ev dlock.Event) {
		mu.Lock()
		kinds = append(kinds, ev.Kind)
		mu.Unlock()
		if ev.Name != "" && ev.Result == "acquired" && ev.Fence == 0 {
			t.Errorf("acquire event without fence: %+v", ev)
		}
	}))
	lease, _ := l.Mutex("obs").TryLock(ctx)
	l.Mutex("obs").TryLock(ctx)
	lease.Release(ctx)
	mu.Lock()
	defer mu.Unlock()
	want := []dlock.EventKind{dlock.EventAcquire, dlock.EventAcquire, dlock.EventRelease}
	if len(kinds) != len(want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Errorf("event %d = %v, want %v", i, kinds[i], want[i])
		}
	}
}

func TestAcquireHonoursRequestQueueTTL(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	l := newLocker(t, mem, dlock.WithTTL(10*time.Second))
	holder, err := l.Fair("q").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	if _, err := l.Acquire(ctx, dlock.Request{Name: "q", Mode: dlock.ModeFair, Queue: true, QueueTTL: time.Millisecond}, false); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Acquire with QueueTTL 1ms = %v, want ErrInvalid (the request's queue TTL is used)", err)
	}
}

// TestSchedulerNotWokenPerLease: taking and releasing leases one after the
// other does not wake the renewal scheduler for each (its timer moves
// instead); it still ends a lease at its validity
// (TestLeaseLostBeforeStoreExpiryWhenRenewalStalls).
func TestSchedulerNotWokenPerLease(t *testing.T) {
	l := newLocker(t, memory.New(), dlock.WithTTL(time.Minute))
	ctx := context.Background()
	before := dlock.SchedulerLooks(l)
	for i := range 1000 {
		ls, err := l.Mutex("n" + strconv.Itoa(i)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := dlock.SchedulerLooks(l) - before; n > 2 {
		t.Errorf("the scheduler looked %d times over 1000 leases taken and released, want a few at most", n)
	}
}

// TestLeaseDoneBeforeAndAfterTheEnd: Done is closed when the lease ends,
// whether it was asked for before (a released or lost lease closes it) or
// only after (the channel is made on demand).
func TestLeaseDoneBeforeAndAfterTheEnd(t *testing.T) {
	ctx := context.Background()
	l := newLocker(t, memory.New())
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	early, err := l.Mutex("early").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := early.Done()
	if closed(done) || early.Done() != done {
		t.Fatal("Done of a held lease: closed, or a different channel each call")
	}
	late, err := l.Mutex("late").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost, err := l.Mutex("lost").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lostDone := lost.Done()
	if err := early.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := late.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !closed(done) || !closed(late.Done()) {
		t.Errorf("after Release: Done asked before closed %v, asked after closed %v; want both", closed(done), closed(late.Done()))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !closed(lostDone) || !closed(lost.Done()) || !errors.Is(lost.Err(), dlock.ErrLeaseLost) {
		t.Errorf("after Close: Done closed %v / %v, Err %v; want closed and ErrLeaseLost", closed(lostDone), closed(lost.Done()), lost.Err())
	}
}

// cancelAfterRefusal refuses through the memory store, and at the second
// refusal (the wait's first round after the first attempt) ends the wait's
// context; its Watch always reports a change, so the wait's sleep may wake
// on it rather than on the ended context and try once more.
type cancelAfterRefusal struct {
	*memory.Store
	cancel  context.CancelFunc
	refused int
}

func (s *cancelAfterRefusal) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	g, err := s.Store.Acquire(ctx, req)
	if err == nil && !g.Acquired && s.cancel != nil {
		if s.refused++; s.refused == 2 {
			s.cancel()
		}
	}
	return g, err
}

func (s *cancelAfterRefusal) Watch(context.Context, string, dlock.Mode) (<-chan struct{}, func(), error) {
	ch := make(chan struct{})
	close(ch)
	return ch, func() {}, nil
}

// TestWaitEndedKeepsTheLastRefusal: a wait whose context ends between a
// refused round and the next attempt (which is then never sent) reports the
// refusal it had, with its RetryAfter and Held, joined with ctx.Err(). The
// sleep picks the watch or the ended context at random, so 32 waits all but
// surely take the path where the next attempt finds the context ended
// (before the fix: a LockedError with RetryAfter 0).
func TestWaitEndedKeepsTheLastRefusal(t *testing.T) {
	ctx := context.Background()
	s := &cancelAfterRefusal{Store: memory.New()}
	l := newLocker(t, s)
	if _, err := l.Reentrant("busy").TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 32 {
		wctx, cancel := context.WithCancel(ctx)
		s.cancel, s.refused = cancel, 0
		_, err := l.Reentrant("busy", dlock.WithOwner("other")).Lock(wctx)
		var le *dlock.LockedError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &le) || le.RetryAfter <= 0 || le.Held != dlock.ModeReentrant {
			t.Fatalf("Lock with a context ended after a refusal = %v (%+v), want the refusal (RetryAfter > 0, Held reentrant) and context.Canceled", err, le)
		}
		cancel()
	}
}

// A fair waiter that brings its own token (an HTTP client that retries with
// it) keeps it across store errors, and with it its place: it is served
// before a waiter that queued after it.
func TestFairWaiterKeepsItsTokenAcrossErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memory.New()
		holder := newLocker(t, mem, dlock.WithTTL(10*time.Second))
		a, err := holder.Fair("kept").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs := &faultyStore{Store: mem}
		waiters := newLocker(t, struct {
			*faultyStore
			store.GrantWatcher
		}{fs, mem}, dlock.WithTTL(time.Second), dlock.WithBackoff(10*time.Millisecond, 20*time.Millisecond))
		const token = "fedcba9876543210fedcba9876543210"
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res := make(chan *dlock.Lease, 1)
		go func() {
			ls, err := waiters.Acquire(wctx, dlock.Request{Name: "kept", Mode: dlock.ModeFair, Queue: true, Token: token}, true)
			if err != nil {
				t.Errorf("Acquire = %v", err)
			}
			res <- ls
		}()
		synctest.Wait() // queued
		// A second waiter queues behind it, on a store that works.
		second := make(chan *dlock.Lease, 1)
		go func() {
			ls, _ := newLocker(t, mem, dlock.WithTTL(time.Second)).Fair("kept").Lock(wctx)
			second <- ls
		}()
		synctest.Wait()
		fs.mu.Lock()
		fs.failAcquires = 2 // the next round and its recheck fail
		fs.mu.Unlock()
		time.Sleep(time.Second) // a refresh or two, one of them failing
		a.Release(ctx)
		ls := <-res
		if ls == nil {
			cancel()
			<-second
			return
		}
		if ls.Token() != token {
			t.Errorf("the waiter's lease has token %q, want the caller's %q", ls.Token(), token)
		}
		select {
		case b := <-second:
			t.Errorf("the waiter queued second got the lock (fence %d) before the first, whose store calls failed", b.Fence())
		default:
		}
		if st, _ := mem.State(ctx, "kept"); st.Queue != 1 {
			t.Errorf("queue holds %d entries after the first waiter got the lock, want 1 (the second)", st.Queue)
		}
		ls.Release(ctx)
		cancel()
		if b := <-second; b != nil {
			b.Release(ctx)
		}
	})
}

// Release with a context that has already ended (a request's context in a
// deferred Release) still frees the name at once.
func TestReleaseWithACancelledContextFreesTheName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		l := newLocker(t, mem, dlock.WithTTL(time.Minute))
		ctx, cancel := context.WithCancel(context.Background())
		lease, err := l.Mutex("deferred").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := lease.Release(ctx); err != nil {
			t.Errorf("Release(cancelled ctx) = %v, want nil", err)
		}
		if _, err := l.Mutex("deferred").TryLock(context.Background()); err != nil {
			t.Errorf("TryLock right after Release(cancelled ctx) = %v, want the lock", err)
		}
	})
}

// TestTryAcquireKeepsItsQueuePlace: a single attempt with Queue set that is
// refused keeps its place (the caller refreshes and claims it by repeating
// the acquire with its token, as /v1 clients do); the lock released is held
// for that place, not given to a newcomer.
func TestTryAcquireKeepsItsQueuePlace(t *testing.T) {
	ctx := context.Background()
	l := newLocker(t, memory.New(), dlock.WithTTL(10*time.Second))
	holder, err := l.Fair("q").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queued := dlock.Request{Name: "q", Mode: dlock.ModeFair, Queue: true, QueueTTL: 5 * time.Second, Token: "queued-token-0123456789"}
	if _, err := l.Acquire(ctx, queued, false); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("queued TryAcquire = %v, want ErrLocked", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ls, err := l.Fair("q").TryLock(ctx); err == nil {
		ls.Release(ctx)
		t.Fatal("a newcomer took the lock released to a kept queue place: the single attempt gave its place up")
	}
	ls, err := l.Acquire(ctx, queued, false)
	if err != nil {
		t.Fatalf("the queued token's claim = %v, want the handed-over lock", err)
	}
	ls.Release(ctx)
}
