package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// latencyStore wraps the memory store with scripted latencies (in a synctest
// bubble): the store applies a request after its apply delay and the caller
// hears the reply after a further reply delay, so the order in which the
// store runs requests and the order in which the client hears the answers
// can differ, as over a network. Pushed grants are delivered late too.
type latencyStore struct {
	*memory.Store
	mu sync.Mutex
	// extend returns the delays of an extension to req.TTL, and whether
	// the link is down (the call fails unapplied).
	extend func(req dlock.Request) (apply, reply time.Duration, down bool)
	// acquireReply delays the reply to every Acquire of token.
	acquireReply map[string]time.Duration
	// grantDelay delays every pushed grant.
	grantDelay time.Duration
	// extending receives, when it has room, the TTL of each extension as it
	// reaches the wrapper.
	extending chan time.Duration
}

var errLinkDown = errors.New("link down")

func (s *latencyStore) Extend(ctx context.Context, reqs []dlock.Request) []error {
	apply, reply, down := time.Duration(0), time.Duration(0), false
	if s.extend != nil {
		apply, reply, down = s.extend(reqs[0])
	}
	if s.extending != nil {
		select {
		case s.extending <- reqs[0].TTL:
		default:
		}
	}
	errs := make([]error, len(reqs))
	if down {
		for i := range errs {
			errs[i] = errLinkDown
		}
		return errs
	}
	// The request travels on when the caller gives up, as over a network.
	res := make(chan []error, 1)
	go func() {
		time.Sleep(apply)
		errs := s.Store.Extend(context.Background(), reqs)
		time.Sleep(reply)
		res <- errs
	}()
	select {
	case errs = <-res:
	case <-ctx.Done():
		for i := range errs {
			errs[i] = ctx.Err()
		}
	}
	return errs
}

func (s *latencyStore) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	g, err := s.Store.Acquire(ctx, req)
	s.mu.Lock()
	d := s.acquireReply[req.Token]
	s.mu.Unlock()
	time.Sleep(d)
	return g, err
}

func (s *latencyStore) WatchGrant(ctx context.Context, req dlock.Request) (<-chan store.Grant, func(), error) {
	in, stop, err := s.Store.WatchGrant(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	out := make(chan store.Grant, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case g := <-in:
				select {
				case <-time.After(s.grantDelay):
				case <-done:
					return
				}
				select {
				case out <- g:
				default:
				}
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return out, func() { once.Do(func() { stop(); close(done) }) }, nil
}

// checkNotOutlived fails when lease still looks valid although another
// holder got the name: a lease must never outlive the store's hold.
func checkNotOutlived(t *testing.T, lease *dlock.Lease, other *dlock.Lease, err error) {
	t.Helper()
	if err != nil {
		return // the store still holds lease's token: fine
	}
	if ttl := lease.TTL(); ttl > 0 || lease.Err() == nil {
		t.Errorf("a second holder (fence %d) got %q while the first lease (fence %d) says TTL %v, Err %v: the lease outlived its hold",
			other.Fence(), lease.Name(), lease.Fence(), ttl, lease.Err())
	}
}

// reorderedExtends returns a store whose 10s extensions are applied at once
// and answered 50ms later, and every other one answered after 10ms: a 1s
// extension sent after a 10s one is applied after it and answered first.
func reorderedExtends() *latencyStore {
	s := &latencyStore{Store: memory.New()}
	s.extend = func(req dlock.Request) (time.Duration, time.Duration, bool) {
		if req.TTL == 10*time.Second {
			return 0, 50 * time.Millisecond, false
		}
		return 0, 10 * time.Millisecond, false
	}
	return s
}

// extendTwice calls extend to 10s and, once that is in flight (in a
// synctest bubble), to 1s, and waits for both.
func extendTwice(ctx context.Context, extend func(context.Context, time.Duration) error) {
	var wg sync.WaitGroup
	wg.Go(func() { extend(ctx, 10*time.Second) })
	synctest.Wait()
	wg.Go(func() { extend(ctx, time.Second) })
	wg.Wait()
}

// Two Extends in flight on one lease, applied by the store in one order and
// answered in the other, must not leave the lease believing the longer one.
func TestConcurrentExtendsNeverOutliveTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := reorderedExtends()
		l := newLocker(t, s, dlock.WithTTL(time.Second))
		lease, err := l.Mutex("twice").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		extendTwice(ctx, lease.Extend)

		time.Sleep(1200 * time.Millisecond) // past any 1s hold
		other := newLocker(t, s.Store, dlock.WithTTL(time.Second))
		got, err := other.Mutex("twice").TryLock(ctx)
		checkNotOutlived(t, lease, got, err)
	})
}

// A user Extend beside an auto-renewal in flight: the renewal, sent with the
// old TTL and applied after the Extend, must not be counted at the new TTL.
func TestExtendBesideRenewalNeverOutlivesTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var mu sync.Mutex
		down := false
		s := &latencyStore{Store: memory.New(), extending: make(chan time.Duration, 16)}
		s.extend = func(req dlock.Request) (time.Duration, time.Duration, bool) {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return 0, 0, true
			}
			if req.TTL == time.Second { // the renewal: applied late
				return 50 * time.Millisecond, 50 * time.Millisecond, false
			}
			return 0, 0, false
		}
		l := newLocker(t, s, dlock.WithTTL(time.Second), dlock.WithAutoRenew())
		lease, err := l.Mutex("beside").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ttl := <-s.extending; ttl != time.Second {
			t.Fatalf("first extension has TTL %v, want the renewal's 1s", ttl)
		}
		// The renewal is in flight: extend beside it.
		if err := lease.Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("Extend = %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		down = true // the link to the store drops
		mu.Unlock()

		time.Sleep(1500 * time.Millisecond)
		other := newLocker(t, s.Store, dlock.WithTTL(time.Second))
		got, err := other.Mutex("beside").TryLock(ctx)
		checkNotOutlived(t, lease, got, err)
	})
}

// A fair grant pushed before the waiter's current round and delivered during
// it is stale when that round was refused: the waiter must not count it.
func TestStaleFairGrantIsNotTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memory.New()
		// Grants travel for 4.915s: the one made at 0.1s lands at 5.015s,
		// while the waiter's round sent at 5.01s is on its way (its
		// replies take 10ms, and it waits 5s, a third of its queue TTL,
		// after each).
		s := &latencyStore{Store: mem, grantDelay: 4915 * time.Millisecond, acquireReply: map[string]time.Duration{}}
		holders := newLocker(t, mem, dlock.WithTTL(10*time.Second))
		a, err := holders.Fair("stale").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const token = "0123456789abcdef0123456789abcdef"
		s.acquireReply[token] = 10 * time.Millisecond
		waiters := newLocker(t, s, dlock.WithTTL(time.Second), dlock.WithQueueTTL(15*time.Second))
		type result struct {
			lease *dlock.Lease
			err   error
			at    time.Time
		}
		res := make(chan result, 1)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		go func() {
			ls, err := waiters.Acquire(wctx, dlock.Request{Name: "stale", Mode: dlock.ModeFair, Queue: true, Token: token}, true)
			res <- result{ls, err, time.Now()}
		}()
		time.Sleep(100 * time.Millisecond)
		if err := a.Release(ctx); err != nil { // handed to the waiter, whose hold runs out at 1.1s
			t.Fatal(err)
		}
		time.Sleep(1900 * time.Millisecond)
		c, err := holders.Fair("stale").TryLock(ctx) // at 2s the name is free: c takes it
		cAt := time.Now()
		if err != nil {
			t.Fatalf("TryLock after the waiter's hold ran out = %v", err)
		}
		time.Sleep(3500 * time.Millisecond) // the waiter's round at 5.01s, the grant at 5.015s
		select {
		case r := <-res:
			if r.err == nil {
				checkNotOutlived(t, r.lease, c, nil)
				if r.at.After(cAt) && r.lease.Fence() < c.Fence() {
					t.Errorf("waiter's lease, returned after the holder's grant, has fence %d, below the holder's %d", r.lease.Fence(), c.Fence())
				}
				r.lease.Release(ctx)
			}
			c.Release(ctx)
			return
		default:
		}
		c.Release(ctx)
		if r := <-res; r.err != nil {
			t.Errorf("waiter after the holder released: %v", r.err)
		} else {
			if r.lease.Fence() <= c.Fence() {
				t.Errorf("waiter's lease has fence %d, not above the previous holder's %d", r.lease.Fence(), c.Fence())
			}
			r.lease.Release(ctx)
		}
	})
}

// A holder that resumes past its lease's validity and releases before the
// scheduler has noticed must not free the name: its lock-delay still holds.
func TestReleaseAfterValidityKeepsTheLockDelay(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New()
			l := newLocker(t, mem, dlock.WithTTL(time.Second), dlock.WithLockDelay(5*time.Second))
			lease, err := l.Mutex("paused").TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Wake at the very instant the validity ends, beside the
			// scheduler's own timer: whichever runs first, the lease is
			// lost then.
			time.Sleep(lease.TTL())
			if err := lease.Release(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
				t.Errorf("Release at the end of validity = %v, want ErrLeaseLost", err)
			}
			other := newLocker(t, mem, dlock.WithTTL(time.Second))
			if got, err := other.Mutex("paused").TryLock(ctx); err == nil {
				t.Errorf("TryLock right after a late Release got the lock (fence %d), want it kept by the 5s lock-delay", got.Fence())
			}
		})
	}
}

// Err, TTL and Done see a lease whose validity has passed as lost, whether
// or not the scheduler has marked it yet.
func TestValidityIsTheTruthForEveryAccessor(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			l := newLocker(t, memory.New(), dlock.WithTTL(time.Second))
			lease, err := l.Mutex("truth").TryLock(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(lease.TTL())
			if err := lease.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
				t.Errorf("Err at the end of validity = %v, want ErrLeaseLost", err)
			}
			if ttl := lease.TTL(); ttl != 0 {
				t.Errorf("TTL at the end of validity = %v, want 0", ttl)
			}
			select {
			case <-lease.Done():
			default:
				t.Errorf("Done not closed at the end of validity")
			}
			if err := lease.Extend(context.Background(), time.Second); !errors.Is(err, dlock.ErrLeaseLost) {
				t.Errorf("Extend at the end of validity = %v, want ErrLeaseLost", err)
			}
		})
	}
}

// An Extend whose answer never came may still reach the store later, and
// shorten the hold to its TTL from then: a later, longer extension must not
// count beyond it.
func TestUnconfirmedExtendCapsLaterValidity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := &latencyStore{Store: memory.New()}
		s.extend = func(req dlock.Request) (time.Duration, time.Duration, bool) {
			if req.TTL == 200*time.Millisecond {
				return 100 * time.Millisecond, 0, false // applied after the caller gave up, and after the 10s one
			}
			return 0, 0, false
		}
		l := newLocker(t, s, dlock.WithTTL(time.Second))
		lease, err := l.Mutex("capped").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		go lease.Extend(short, 200*time.Millisecond)
		synctest.Wait()
		if err := lease.Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("Extend(10s) = %v", err)
		}
		if ttl := lease.TTL(); ttl > 200*time.Millisecond {
			t.Errorf("TTL after an unconfirmed 200ms extension and a 10s one = %v, want at most 200ms", ttl)
		}
		time.Sleep(400 * time.Millisecond) // the late 200ms extension ran out at 300ms
		other := newLocker(t, s.Store, dlock.WithTTL(time.Second))
		got, err := other.Mutex("capped").TryLock(ctx)
		checkNotOutlived(t, lease, got, err)
	})
}

// multiLatencyStore is a latencyStore that takes several names in one
// operation (a test stand-in for Valkey's scripts, built from single
// operations of the memory store): an atomic Multi's extensions go through
// ExtendMulti, with the wrapper's latencies.
type multiLatencyStore struct{ *latencyStore }

func (s multiLatencyStore) AtomicMulti(names []string) bool { return true }

func (s multiLatencyStore) AcquireMulti(ctx context.Context, reqs []dlock.Request) (store.MultiGrant, error) {
	mg := store.MultiGrant{Acquired: true}
	for i, req := range reqs {
		g, err := s.Store.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			for _, taken := range reqs[:i] {
				s.Store.Release(ctx, taken)
			}
			return store.MultiGrant{Refused: i, Refusal: g}, err
		}
		mg.Fences = append(mg.Fences, g.Fence)
	}
	return mg, nil
}

func (s multiLatencyStore) ExtendMulti(ctx context.Context, reqs []dlock.Request) []error {
	return s.latencyStore.Extend(ctx, reqs)
}

func (s multiLatencyStore) ReleaseMulti(ctx context.Context, reqs []dlock.Request) []error {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = s.Store.Release(ctx, req)
	}
	return errs
}

// Two Extends of one atomic multi-lease in flight, applied in one order and
// answered in the other, must not leave any name's lease believing the
// longer one.
func TestConcurrentMultiExtendsNeverOutliveTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := reorderedExtends()
		l := newLocker(t, multiLatencyStore{s}, dlock.WithTTL(time.Second))
		m := l.Multi([]string{"m1", "m2"})
		if !m.Atomic() {
			t.Fatal("Multi over a MultiStore is not atomic")
		}
		ml, err := m.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		extendTwice(ctx, ml.Extend)

		time.Sleep(1200 * time.Millisecond)
		other := newLocker(t, s.Store, dlock.WithTTL(time.Second))
		got, err := other.Mutex("m1").TryLock(ctx)
		if err == nil && (ml.TTL() > 0 || ml.Err() == nil) {
			t.Errorf("a second holder (fence %d) got m1 while the multi-lease says TTL %v, Err %v", got.Fence(), ml.TTL(), ml.Err())
		}
	})
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
