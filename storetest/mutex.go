package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// testMutexStore checks ModeMutex on the Store interface itself.
func testMutexStore(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"MutualExclusion", storeMutualExclusion},
		{"TTLExpiry", storeTTLExpiry},
		{"ExpiredHoldNotExtended", storeExpiredNotExtended},
		{"OnlyHolderReleasesAndExtends", storeOnlyHolder},
		{"ReleaseUnknownToken", storeReleaseUnknown},
		{"FencesIncrease", storeFencesIncrease},
		{"IdempotentAcquire", storeIdempotentAcquire},
		{"RetryAfter", storeRetryAfter},
		{"ExtendBatch", storeExtendBatch},
		{"WatchWokenOnRelease", storeWatchRelease},
		{"Inspector", storeInspector},
		{"Names", storeNames},
		{"Ping", storePing},
		{"Handoff", storeMutexHandoff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parallel(t)
			tt.fn(t, h.New(t))
		})
	}
}

// storeMutualExclusion runs many goroutines that each take the lock, check
// that nobody else is inside, and give it back, for many rounds.
func storeMutualExclusion(t *testing.T, s store.Store) {
	const workers, rounds = 16, 12
	ctx := testContext(t)
	name := lockName(t)
	var (
		inside    atomic.Int32
		counter   atomic.Int64
		lastFence atomic.Int64 // written only inside the critical section
		overlaps  atomic.Int64
		entries   atomic.Int64
		wg        sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			wake, stop, err := s.Watch(ctx, name, store.ModeMutex)
			if err != nil {
				t.Errorf("Watch(%q) = %v", name, err)
				return
			}
			defer stop()
			for r := 0; r < rounds; {
				req := mutexReq(name, newToken(), longTTL)
				g, err := s.Acquire(ctx, req)
				if err != nil {
					t.Errorf("Acquire(%q) = %v", name, err)
					return
				}
				if !g.Acquired {
					// Wait for a wake-up, or retry soon in case the store
					// only wakes some watchers (not too soon: 15 pollers
					// every millisecond or two kept a loaded etcd from
					// finishing in a minute).
					timer := time.NewTimer(time.Duration(2+rand.IntN(9)) * time.Millisecond)
					select {
					case <-wake:
					case <-timer.C:
					case <-ctx.Done():
						timer.Stop()
						t.Error(ctx.Err())
						return
					}
					timer.Stop()
					continue
				}
				if n := inside.Add(1); n != 1 {
					overlaps.Add(1)
				}
				entries.Add(1)
				last := lastFence.Load()
				lastFence.Store(g.Fence)
				v := counter.Load()
				runtime.Gosched()
				counter.Store(v + 1)
				inside.Add(-1)
				if err := s.Release(ctx, req); err != nil {
					t.Errorf("Release(%q) by the holder = %v, want nil", name, err)
					return
				}
				if g.Fence <= last {
					t.Errorf("grant fence %d after fence %d; want strictly increasing", g.Fence, last)
					return
				}
				r++
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d critical sections overlapped, want 0", n)
	}
	if got, want := counter.Load(), entries.Load(); got != want {
		t.Errorf("counter = %d after %d critical sections; updates were lost to overlaps", got, want)
	}
	if t.Failed() {
		return
	}
	if n := entries.Load(); n != workers*rounds {
		t.Errorf("%d critical sections, want %d", n, workers*rounds)
	}
	mustAcquire(t, s, mutexReq(name, newToken(), longTTL))
}

// storeTTLExpiry checks that a hold that is not extended frees the lock
// after its TTL, and not before.
func storeTTLExpiry(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	const ttl = 200 * time.Millisecond
	a := mutexReq(name, newToken(), ttl)
	start := time.Now()
	ga := mustAcquire(t, s, a)

	b := mutexReq(name, newToken(), longTTL)
	deadline := start.Add(waitTimeout)
	for {
		g, err := s.Acquire(ctx, b)
		returned := time.Since(start)
		if err != nil {
			t.Fatalf("Acquire(%q) = %v", name, err)
		}
		if !g.Acquired && (g.RetryAfter <= 0 || g.RetryAfter > ttl) {
			t.Errorf("refused Acquire RetryAfter = %v, want in (0, %v]", g.RetryAfter, ttl)
		}
		if g.Acquired {
			if returned < ttl-clockSlack {
				t.Fatalf("lock with TTL %v granted to another token %v after the first grant; want not before the TTL", ttl, returned)
			}
			if g.Fence <= ga.Fence {
				t.Errorf("fence after expiry = %d, want > %d", g.Fence, ga.Fence)
			}
			t.Logf("lock with TTL %v free again %v after the grant", ttl, returned)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock with TTL %v still held %v later (RetryAfter %v)", ttl, waitTimeout, g.RetryAfter)
		}
		time.Sleep(min(max(g.RetryAfter, time.Millisecond), 20*time.Millisecond))
	}

	// The expired holder holds nothing any more.
	if errs := s.Extend(ctx, []store.Request{a}); len(errs) != 1 || !errors.Is(errs[0], store.ErrNotHeld) {
		t.Errorf("Extend by the expired holder = %v, want [ErrNotHeld]", errs)
	}
	if err := s.Release(ctx, a); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release by the expired holder = %v, want ErrNotHeld", err)
	}
	if g, err := s.Acquire(ctx, a); err != nil || g.Acquired {
		t.Errorf("retried Acquire by the expired holder = %+v, %v; want a refusal", g, err)
	}
	if err := s.Release(ctx, b); err != nil {
		t.Errorf("Release by the new holder = %v, want nil", err)
	}
}

// storeExpiredNotExtended checks that a hold whose TTL ran out cannot be
// brought back by Extend, even when nobody took the lock meanwhile.
func storeExpiredNotExtended(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	const ttl = 100 * time.Millisecond
	a := mutexReq(name, newToken(), ttl)
	mustAcquire(t, s, a)
	time.Sleep(ttl + 50*time.Millisecond) // let the hold run out
	a.TTL = longTTL
	if errs := s.Extend(ctx, []store.Request{a}); len(errs) != 1 || !errors.Is(errs[0], store.ErrNotHeld) {
		t.Errorf("Extend of an expired hold = %v, want [ErrNotHeld]", errs)
	}
	if err := s.Release(ctx, a); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release of an expired hold = %v, want ErrNotHeld", err)
	}
	mustAcquire(t, s, mutexReq(name, newToken(), time.Second))
}

// storeOnlyHolder checks that other tokens can neither release nor extend
// a hold, and leave it untouched when they try.
func storeOnlyHolder(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	a := mutexReq(name, newToken(), 10*time.Second)
	mustAcquire(t, s, a)

	other := mutexReq(name, newToken(), 150*time.Millisecond)
	if err := s.Release(ctx, other); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release by another token = %v, want ErrNotHeld", err)
	}
	if errs := s.Extend(ctx, []store.Request{other}); len(errs) != 1 || !errors.Is(errs[0], store.ErrNotHeld) {
		t.Errorf("Extend by another token = %v, want [ErrNotHeld]", errs)
	}
	c := mutexReq(name, newToken(), longTTL)
	if g := mustRefuse(t, s, c); g.RetryAfter < 5*time.Second {
		t.Errorf("RetryAfter after another token's Release and Extend = %v, want the holder's lease (10s) untouched", g.RetryAfter)
	}

	a.TTL = 20 * time.Second
	if errs := s.Extend(ctx, []store.Request{a}); len(errs) != 1 || errs[0] != nil {
		t.Errorf("Extend by the holder = %v, want [nil]", errs)
	}
	if g := mustRefuse(t, s, c); g.RetryAfter <= 10*time.Second {
		t.Errorf("RetryAfter after the holder extended to 20s = %v, want > 10s", g.RetryAfter)
	}
	if err := s.Release(ctx, a); err != nil {
		t.Errorf("Release by the holder = %v, want nil", err)
	}
	if err := s.Release(ctx, a); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("second Release by the holder = %v, want ErrNotHeld", err)
	}
	if errs := s.Extend(ctx, []store.Request{a}); len(errs) != 1 || !errors.Is(errs[0], store.ErrNotHeld) {
		t.Errorf("Extend after Release = %v, want [ErrNotHeld]", errs)
	}
	mustAcquire(t, s, c)
	s.Release(ctx, c)
}

// storeReleaseUnknown checks ErrNotHeld for tokens that never held.
func storeReleaseUnknown(t *testing.T, s store.Store) {
	ctx := testContext(t)
	free := mutexReq(lockName(t), newToken(), time.Second)
	if err := s.Release(ctx, free); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release on a lock never taken = %v, want ErrNotHeld", err)
	}
	if errs := s.Extend(ctx, []store.Request{free}); len(errs) != 1 || !errors.Is(errs[0], store.ErrNotHeld) {
		t.Errorf("Extend on a lock never taken = %v, want [ErrNotHeld]", errs)
	}
	// The failed calls created nothing: the lock is free.
	mustAcquire(t, s, free)
	if err := s.Release(ctx, free); err != nil {
		t.Errorf("Release by the holder = %v, want nil", err)
	}
}

// storeFencesIncrease checks fences over many grants to different tokens.
func storeFencesIncrease(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	var last int64
	for i := range 50 {
		req := mutexReq(name, newToken(), longTTL)
		g := mustAcquire(t, s, req)
		if g.Fence <= last {
			t.Fatalf("grant %d: fence %d after fence %d; want strictly increasing", i, g.Fence, last)
		}
		last = g.Fence
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release = %v, want nil", err)
		}
	}
}

// storeIdempotentAcquire checks that a repeated Acquire by the holder's
// token returns the same fence and refreshes the TTL.
func storeIdempotentAcquire(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	a := mutexReq(name, newToken(), 5*time.Second)
	g1 := mustAcquire(t, s, a)
	a.TTL = 20 * time.Second
	g2 := mustAcquire(t, s, a)
	if g2.Fence != g1.Fence {
		t.Errorf("retried Acquire fence = %d, want %d (the same grant)", g2.Fence, g1.Fence)
	}
	if g := mustRefuse(t, s, mutexReq(name, newToken(), time.Second)); g.RetryAfter <= 10*time.Second {
		t.Errorf("RetryAfter after the retried Acquire with TTL 20s = %v, want > 10s (TTL refreshed)", g.RetryAfter)
	}
	if err := s.Release(ctx, a); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	g3 := mustAcquire(t, s, a)
	if g3.Fence <= g1.Fence {
		t.Errorf("Acquire after Release fence = %d, want > %d (a new grant)", g3.Fence, g1.Fence)
	}
	s.Release(ctx, a)
}

// storeRetryAfter checks that a refusal's RetryAfter is the holder's real
// remaining time, as far as the test can measure it from outside.
func storeRetryAfter(t *testing.T, s store.Store) {
	name := lockName(t)
	const ttl = 5 * time.Second
	sent := time.Now()
	mustAcquire(t, s, mutexReq(name, newToken(), ttl))
	granted := time.Now()
	check := func(when string) {
		t.Helper()
		asked := time.Now()
		g := mustRefuse(t, s, mutexReq(name, newToken(), ttl))
		answered := time.Now()
		// The hold began between sent and granted, the refusal was
		// decided between asked and answered. A node's clock is read
		// within that acquire's round trip too (a loaded machine stretches
		// both), so its length is allowed on top of clockSlack.
		lo := ttl - answered.Sub(sent) - 100*time.Millisecond
		hi := ttl - asked.Sub(granted) + clockSlack + granted.Sub(sent)
		if g.RetryAfter <= 0 || g.RetryAfter > ttl || g.RetryAfter < lo || g.RetryAfter > hi {
			t.Errorf("%s: RetryAfter = %v, want in [%v, %v] and (0, %v]", when, g.RetryAfter, lo, hi, ttl)
		}
	}
	check("at once")
	time.Sleep(300 * time.Millisecond) // let part of the TTL pass
	check("after 300ms")
}

// storeExtendBatch checks that Extend answers each request in order.
func storeExtendBatch(t *testing.T, s store.Store) {
	ctx := testContext(t)
	n1, n2, n3 := lockName(t), lockName(t), lockName(t)
	a1 := mutexReq(n1, newToken(), 5*time.Second)
	a2 := mutexReq(n2, newToken(), 5*time.Second)
	mustAcquire(t, s, a1)
	mustAcquire(t, s, a2)
	const ttl = 20 * time.Second
	reqs := []store.Request{
		mutexReq(n1, a1.Token, ttl),
		mutexReq(n2, newToken(), ttl),
		mutexReq(n3, newToken(), ttl),
		mutexReq(n2, a2.Token, ttl),
		mutexReq(n1, a2.Token, ttl),
	}
	want := []error{nil, store.ErrNotHeld, store.ErrNotHeld, nil, store.ErrNotHeld}
	errs := s.Extend(ctx, reqs)
	if len(errs) != len(want) {
		t.Fatalf("Extend of %d requests returned %d errors: %v", len(reqs), len(errs), errs)
	}
	for i := range want {
		if (want[i] == nil) != (errs[i] == nil) || !errors.Is(errs[i], want[i]) {
			t.Errorf("Extend: error %d (%s) = %v, want %v", i, reqs[i].Name, errs[i], want[i])
		}
	}
	for _, n := range []string{n1, n2} {
		if g := mustRefuse(t, s, mutexReq(n, newToken(), time.Second)); g.RetryAfter <= 10*time.Second {
			t.Errorf("RetryAfter on %s after Extend to %v = %v, want > 10s", n, ttl, g.RetryAfter)
		}
	}
	if errs := s.Extend(ctx, nil); len(errs) != 0 {
		t.Errorf("Extend(nil) = %v, want no errors", errs)
	}
	s.Release(ctx, a1)
	s.Release(ctx, a2)

	// A batch as large as a busy Locker's renewals, over many names (on
	// a cluster, many slots): every other lock is held.
	const n = 64
	big := make([]store.Request, n)
	for i := range big {
		big[i] = mutexReq(lockName(t), newToken(), longTTL)
		if i%2 == 0 {
			mustAcquire(t, s, big[i])
		}
		big[i].TTL = ttl
	}
	errs = s.Extend(ctx, big)
	if len(errs) != n {
		t.Fatalf("Extend of %d requests returned %d errors", n, len(errs))
	}
	for i, err := range errs {
		if i%2 == 0 && err != nil || i%2 == 1 && !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Extend of %d: error %d = %v, want %v", n, i, err, []error{nil, store.ErrNotHeld}[i%2])
		}
	}
	for i := 0; i < n; i += 2 {
		s.Release(ctx, big[i])
	}
}

// storeWatchRelease checks that a release wakes a watcher.
func storeWatchRelease(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	a := mutexReq(name, newToken(), longTTL)
	mustAcquire(t, s, a)
	wake, stop, err := s.Watch(ctx, name, store.ModeMutex)
	if err != nil {
		t.Fatalf("Watch(%q) = %v", name, err)
	}
	defer stop()
	select { // a wake-up before the release is allowed; drop it
	case <-wake:
	default:
	}
	released := time.Now()
	if err := s.Release(ctx, a); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case <-wake:
		t.Logf("watcher woken %v after the release call", time.Since(released))
	case <-timer.C:
		t.Fatalf("watcher not woken within %v of the release", waitTimeout)
	}
	stop()
	stop() // stop is idempotent
}

// storeInspector checks State and List, when the store implements
// store.Inspector.
func storeInspector(t *testing.T, s store.Store) {
	in, ok := s.(store.Inspector)
	if !ok {
		t.Skip("store does not implement store.Inspector")
	}
	ctx := testContext(t)
	name := lockName(t)
	a := mutexReq(name, newToken(), 10*time.Second)
	g := mustAcquire(t, s, a)

	st, err := in.State(ctx, name)
	if err != nil {
		t.Fatalf("State(%q) = %v", name, err)
	}
	if st.Name != name || st.Mode != store.ModeMutex || st.Holders != 1 || st.Fence != g.Fence ||
		st.TTL <= 0 || st.TTL > 10*time.Second || st.Queue != 0 {
		t.Errorf("State(%q) of a held mutex = %+v, want Name %q, Mode mutex, 1 holder, Fence %d, TTL in (0, 10s], no queue",
			name, st, name, g.Fence)
	}
	if s := fmt.Sprintf("%+v", st); strings.Contains(s, a.Token) {
		t.Errorf("State(%q) = %s contains the holder's token", name, s)
	}
	list, err := in.List(ctx)
	if err != nil {
		t.Fatalf("List = %v", err)
	}
	found := false
	for _, st := range list {
		if st.Name == name {
			found = true
			if st.Holders != 1 || st.Fence != g.Fence {
				t.Errorf("List entry for %q = %+v, want 1 holder and Fence %d", name, st, g.Fence)
			}
		}
	}
	if !found {
		t.Errorf("List (%d locks) has no entry for held lock %q", len(list), name)
	}
	if s := fmt.Sprintf("%+v", list); strings.Contains(s, a.Token) {
		t.Errorf("List contains the holder's token")
	}

	if err := s.Release(ctx, a); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if st, err := in.State(ctx, name); err != nil || st.Holders != 0 {
		t.Errorf("State(%q) after Release = %+v, %v; want no holders", name, st, err)
	}
	list, err = in.List(ctx)
	if err != nil {
		t.Fatalf("List = %v", err)
	}
	for _, st := range list {
		if st.Name == name && st.Holders != 0 {
			t.Errorf("List entry for released lock %q = %+v, want no holders", name, st)
		}
	}
}

// storeNames checks that valid names of every shape are distinct locks,
// including names that share a Redis Cluster hash tag and names of the
// maximum length.
func storeNames(t *testing.T, s store.Store) {
	ctx := testContext(t)
	base := lockName(t)
	tag := "{" + base + "}"
	long := base + "-" + strings.Repeat("n", 256)
	names := []string{
		base + " with spaces",
		base + "/ünïcödé/日本語",
		base + ":colon:" + base,
		tag + "a",
		tag + "b",
		"a" + tag,
		long[:256],
		long[:255],
	}
	holds := make([]store.Request, len(names))
	for i, name := range names {
		holds[i] = mutexReq(name, newToken(), longTTL)
		mustAcquire(t, s, holds[i]) // free: no other name is this lock
	}
	for i, name := range names {
		mustRefuse(t, s, mutexReq(name, newToken(), time.Second))
		if err := s.Release(ctx, holds[i]); err != nil {
			t.Errorf("Release(%q) = %v, want nil", name, err)
		}
		// Releasing one lock leaves the others held.
		for _, held := range holds[i+1:] {
			if g, err := s.Acquire(ctx, mutexReq(held.Name, newToken(), time.Second)); err != nil || g.Acquired {
				t.Fatalf("Acquire(%q) after Release(%q) = %+v, %v; want a refusal", held.Name, name, g, err)
			}
		}
	}
}

// storePing checks Ping, when the store implements store.Pinger.
func storePing(t *testing.T, s store.Store) {
	p, ok := s.(store.Pinger)
	if !ok {
		t.Skip("store does not implement store.Pinger")
	}
	if err := p.Ping(testContext(t)); err != nil {
		t.Errorf("Ping = %v, want nil", err)
	}
}

// storeMutexHandoff checks, on a store that hands a released mutex to a
// registered waiter (store.GrantWatcher for ModeMutex), that a live
// registered waiter gets the lock with a new fence, and that a waiter
// that gave up (Release of its registration) or died (its registration's
// QueueTTL ran out) is skipped: the lock is then free for anyone.
func storeMutexHandoff(t *testing.T, s store.Store) {
	gw, ok := s.(store.GrantWatcher)
	if !ok {
		t.Skip("store does not implement store.GrantWatcher")
	}
	ctx := testContext(t)
	queued := func(name string, queueTTL time.Duration) (store.Request, <-chan store.Grant, func()) {
		t.Helper()
		req := mutexReq(name, newToken(), longTTL)
		req.Queue, req.QueueTTL = true, queueTTL
		grants, stop, err := gw.WatchGrant(ctx, req)
		if errors.Is(err, store.ErrNotSupported) {
			t.Skipf("WatchGrant(mode mutex) = %v", err)
		}
		if err != nil {
			t.Fatalf("WatchGrant(%q) = %v", name, err)
		}
		t.Cleanup(stop)
		mustRefuse(t, s, req) // registers
		return req, grants, stop
	}

	// A live waiter.
	name := lockName(t)
	h := mutexReq(name, newToken(), longTTL)
	gh := mustAcquire(t, s, h)
	w, grants, _ := queued(name, 10*time.Second)
	released := time.Now()
	if err := s.Release(ctx, h); err != nil {
		t.Fatalf("Release by the holder = %v, want nil", err)
	}
	var pushed int64
	timer := time.NewTimer(2 * time.Second)
	select {
	case g := <-grants:
		t.Logf("handoff pushed %v after the release call", time.Since(released))
		if !g.Acquired || g.Fence <= gh.Fence {
			t.Errorf("pushed grant = %+v, want Acquired with a fence > %d", g, gh.Fence)
		}
		pushed = g.Fence
	case <-timer.C:
		t.Logf("no handoff pushed within 2s (deliveries are best effort)")
	}
	timer.Stop()
	// Handed over or free, the lock is the waiter's on its next Acquire.
	gw2 := mustAcquire(t, s, w)
	if gw2.Fence <= gh.Fence || pushed != 0 && gw2.Fence != pushed {
		t.Errorf("waiter's Acquire after the release: fence %d, want > %d and equal to the pushed fence (%d) if any", gw2.Fence, gh.Fence, pushed)
	}
	if err := s.Release(ctx, w); err != nil {
		t.Errorf("Release by the waiter = %v, want nil", err)
	}

	// A waiter that gave up.
	name = lockName(t)
	h = mutexReq(name, newToken(), longTTL)
	mustAcquire(t, s, h)
	gone, _, stop := queued(name, 10*time.Second)
	if err := s.Release(ctx, gone); err != nil && !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release of a waiter's registration = %v, want nil or ErrNotHeld", err)
	}
	stop()
	if err := s.Release(ctx, h); err != nil {
		t.Fatalf("Release by the holder = %v, want nil", err)
	}
	mustAcquire(t, s, mutexReq(name, newToken(), time.Second)) // not handed to the waiter that left

	// A waiter that died: its registration is not refreshed.
	name = lockName(t)
	h = mutexReq(name, newToken(), longTTL)
	mustAcquire(t, s, h)
	const queueTTL = 150 * time.Millisecond
	_, _, stop = queued(name, queueTTL)
	stop()
	time.Sleep(2 * queueTTL) // let the registration run out
	if err := s.Release(ctx, h); err != nil {
		t.Fatalf("Release by the holder = %v, want nil", err)
	}
	mustAcquire(t, s, mutexReq(name, newToken(), time.Second)) // not handed to the dead waiter
}
