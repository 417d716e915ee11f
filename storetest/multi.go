package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// The multi-lock suite: dlock.Multi over the store's mutexes, all or
// nothing, each name with its own fence, and overlapping multi-locks
// among many goroutines without overlaps, deadlocks or starvation.

func init() { register("Multi", store.ModeMutex, testMulti) }

// multiNames returns n names for one multi-lock from base: plain names
// ("<base>-<i>", spread over a cluster's slots), or, with oneSlot, names
// that share the hash tag {<base>} and so one cluster slot.
func multiNames(base string, n int, oneSlot bool) []string {
	names := make([]string, n)
	for i := range names {
		if oneSlot {
			names[i] = fmt.Sprintf("{%s}-%d", base, i)
		} else {
			names[i] = fmt.Sprintf("%s-%d", base, i)
		}
	}
	return names
}

// slotCases are the two kinds of name sets each multi-lock test runs with.
var slotCases = []struct {
	name    string
	oneSlot bool
}{{"Spread", false}, {"OneSlot", true}}

func testMulti(t *testing.T, h Harness) {
	for _, c := range slotCases {
		t.Run("AllOrNothing/"+c.name, func(t *testing.T) {
			parallel(t)
			multiAllOrNothing(t, h.New(t), c.oneSlot)
		})
		t.Run("Overlapping/"+c.name, func(t *testing.T) {
			parallel(t)
			multiOverlapping(t, h, c.oneSlot)
		})
	}
	t.Run("Atomic", func(t *testing.T) {
		parallel(t)
		multiAtomic(t, h)
	})
	t.Run("LockWaits", func(t *testing.T) {
		parallel(t)
		multiLockWaits(t, h)
	})
	t.Run("Loss", func(t *testing.T) {
		parallel(t)
		multiLoss(t, h.New(t))
	})
}

// multiAllOrNothing takes three names while a mutex holds the middle one:
// refused naming it, and the other two are left free. Once the mutex is
// released all three are taken, each with a fence above its earlier ones.
func multiAllOrNothing(t *testing.T, s store.Store, oneSlot bool) {
	ctx := testContext(t)
	abc := multiNames(lockName(t), 3, oneSlot)
	names := []string{abc[2], abc[0], abc[1], abc[0]}
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	m := l.Multi(names)
	if got, want := m.Names(), abc; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q (sorted, each once)", got, want)
	}
	t.Logf("atomic (one operation): %v", m.Atomic())
	before := map[string]int64{}
	for _, n := range m.Names() {
		req := mutexReq(n, newToken(), longTTL)
		before[n] = mustAcquire(t, s, req).Fence
		mustRelease(t, s, req)
	}
	held := mutexReq(abc[1], newToken(), longTTL)
	hg := mustAcquire(t, s, held)
	before[held.Name] = hg.Fence
	_, err := m.TryLock(ctx)
	var le *dlock.LockedError
	if !errors.As(err, &le) || le.Name != held.Name || le.Held != store.ModeMutex {
		t.Fatalf("TryLock while %q is held = %v; want a *LockedError naming it", held.Name, err)
	}
	for _, n := range []string{abc[0], abc[2]} {
		req := mutexReq(n, newToken(), longTTL)
		before[n] = mustAcquire(t, s, req).Fence // left free by the refused multi-lock
		mustRelease(t, s, req)
	}
	mustRelease(t, s, held)
	ml, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock when all are free = %v", err)
	}
	fences := ml.Fences()
	for _, n := range m.Names() {
		if fences[n] <= before[n] || ml.Fence(n) != fences[n] {
			t.Errorf("fence of %q = %d (Fence %d), want > %d", n, fences[n], ml.Fence(n), before[n])
		}
		mustRefuse(t, s, mutexReq(n, newToken(), longTTL))
	}
	if err := ml.Extend(ctx, 0); err != nil {
		t.Errorf("Extend = %v", err)
	}
	if err := ml.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
	if !isClosed(ml.Done()) || ml.Err() != nil {
		t.Errorf("after Release: Done closed %v, Err %v; want closed, nil", isClosed(ml.Done()), ml.Err())
	}
	if err := ml.Release(ctx); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
	for _, n := range m.Names() {
		req := mutexReq(n, newToken(), longTTL)
		mustAcquire(t, s, req)
		mustRelease(t, s, req)
	}
	for _, bad := range [][]string{nil, {""}, make([]string, store.MaxMultiNames+1)} {
		if _, err := l.Multi(bad).TryLock(ctx); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Multi(%d names).TryLock = %v, want ErrInvalid", len(bad), err)
		}
	}
}

// multiLockWaits checks that Lock waits for a held name (on another store
// of the backend), returns once it is released, and ends with its ctx
// leaving nothing held.
func multiLockWaits(t *testing.T, h Harness) {
	ctx := testContext(t)
	base := lockName(t)
	names := []string{base + "-1", base + "-2"}
	s := h.New(t)
	other := peerStore(t, h, s)
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	held := mutexReq(names[1], newToken(), longTTL)
	mustAcquire(t, other, held)

	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := l.Multi(names).Lock(tctx)
	cancel()
	if !errors.Is(err, dlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock until ctx ends = %v; want ErrLocked and DeadlineExceeded", err)
	}
	free := mutexReq(names[0], newToken(), longTTL)
	mustAcquire(t, s, free) // nothing left behind
	mustRelease(t, s, free)

	type result struct {
		ml  *dlock.MultiLease
		err error
	}
	got := make(chan result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, waitTimeout)
		defer cancel()
		ml, err := l.Multi(names).Lock(wctx)
		got <- result{ml, err}
	}()
	mustRelease(t, other, held)
	r := <-got
	if r.err != nil {
		t.Fatalf("Lock after the release = %v", r.err)
	}
	if err := r.ml.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}

// multiLoss checks that losing one name's lease ends the whole hold and
// that Release then frees the other names.
func multiLoss(t *testing.T, s store.Store) {
	ctx := testContext(t)
	base := lockName(t)
	names := []string{base + "-1", base + "-2"}
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	ml, err := l.Multi(names).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	// Someone with the token drops one name behind the lease's back.
	if err := s.Release(ctx, mutexReq(names[0], ml.Token(), longTTL)); err != nil {
		t.Fatalf("store Release(%q) = %v", names[0], err)
	}
	if err := ml.Extend(ctx, 0); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Extend after a name was lost = %v, want ErrLeaseLost", err)
	}
	if !isClosed(ml.Done()) || !errors.Is(ml.Err(), dlock.ErrLeaseLost) {
		t.Errorf("after a loss: Done closed %v, Err %v; want closed, ErrLeaseLost", isClosed(ml.Done()), ml.Err())
	}
	if err := ml.Release(ctx); !errors.Is(err, dlock.ErrLeaseLost) {
		t.Errorf("Release after a loss = %v, want ErrLeaseLost", err)
	}
	req := mutexReq(names[1], newToken(), longTTL)
	mustAcquire(t, s, req) // freed by that Release
	mustRelease(t, s, req)
}

// multiOverlapping runs 16 goroutines (on two stores of the backend) that
// for two seconds (and until each has had one) take random sets of 1-4 of 8
// names with Lock, hold them briefly and release them. It checks that no name is ever held twice,
// that every Lock returns within its ctx (no deadlock) and that every
// goroutine makes progress, and logs the throughput.
func multiOverlapping(t *testing.T, h Harness, oneSlot bool) {
	const goroutines, nnames, run = 16, 8, 2 * time.Second
	names := multiNames(lockName(t), nnames, oneSlot)
	s := h.New(t)
	var atomicSets atomic.Int64
	peer := peerStore(t, h, s)
	var mu sync.Mutex
	holding := make(map[string]int)
	var violations []string
	var total atomic.Int64
	counts := make([]int, goroutines)
	var failures errs
	var wg sync.WaitGroup
	stopAt := time.Now().Add(run)
	start := time.Now()
	for g := range goroutines {
		on := s
		if g%2 == 1 {
			on = peer
		}
		l := newLocker(t, on, dlock.WithTTL(longTTL), dlock.WithBackoff(time.Millisecond, 50*time.Millisecond))
		rnd := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stopAt) || counts[g] == 0 {
				set := make([]string, 1+rnd.IntN(4))
				for i, j := range rnd.Perm(nnames)[:len(set)] {
					set[i] = names[j]
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
				m := l.Multi(set)
				if m.Atomic() {
					atomicSets.Add(1)
				}
				ml, err := m.Lock(ctx)
				cancel()
				if err != nil {
					failures.add(fmt.Errorf("goroutine %d: Lock(%q) = %v (a deadlock if it timed out)", g, set, err))
					return
				}
				mu.Lock()
				for _, n := range set {
					if holding[n] > 0 {
						violations = append(violations, fmt.Sprintf("goroutine %d took %q while it was held", g, n))
					}
					holding[n]++
				}
				mu.Unlock()
				time.Sleep(time.Duration(rnd.IntN(500)) * time.Microsecond)
				mu.Lock()
				for _, n := range set {
					holding[n]--
				}
				mu.Unlock()
				rctx, rcancel := context.WithTimeout(context.Background(), waitTimeout)
				if err := ml.Release(rctx); err != nil {
					failures.add(fmt.Errorf("goroutine %d: Release(%q) = %v", g, set, err))
				}
				rcancel()
				counts[g]++
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	failures.report(t)
	for _, v := range violations {
		t.Error(v)
	}
	for g, n := range counts {
		if n == 0 {
			t.Errorf("goroutine %d took no multi-lock in %v (starved)", g, run)
		}
	}
	t.Logf("multi-lock: %d acquisitions of 1-4 of %d names by %d goroutines in %v (%.0f/s), %d in one operation of the store; per goroutine %v",
		total.Load(), nnames, goroutines, elapsed.Round(time.Millisecond), float64(total.Load())/elapsed.Seconds(), atomicSets.Load(), counts)
}

// multiAtomic checks, on a store that takes a multi-lock in one operation
// ([store.MultiStore]), the store's side with names in one slot: all or
// nothing, each name an ordinary mutex hold with its own fence, a retry by
// the holder returning the same fences, a refusal by a mutex hold (the key
// a foreign library's SET NX would set) naming the held name and leaving
// nothing held, even names the token held from an earlier attempt;
// extend and release by the token only; and a waiter on one name woken
// (or handed the lock) by the multi-lock's release.
func multiAtomic(t *testing.T, h Harness) {
	ctx := testContext(t)
	s := h.New(t)
	names := multiNames(lockName(t), 3, true)
	ms, ok := s.(store.MultiStore)
	if !ok || !ms.AtomicMulti(names) {
		t.Skipf("%T takes multi-locks name by name", s)
	}
	if l := newLocker(t, s); !l.Multi(names).Atomic() {
		t.Errorf("Multi(%q).Atomic() = false on a store whose AtomicMulti is true", names)
	}
	token := newToken()
	reqs := make([]store.Request, len(names))
	before := make([]int64, len(names))
	for i, n := range names {
		reqs[i] = mutexReq(n, token, longTTL)
		r := mutexReq(n, newToken(), longTTL)
		before[i] = mustAcquire(t, s, r).Fence
		mustRelease(t, s, r)
	}
	mg, err := ms.AcquireMulti(ctx, reqs)
	if err != nil || !mg.Acquired || len(mg.Fences) != len(names) {
		t.Fatalf("AcquireMulti(%q) = %+v, %v; want all acquired", names, mg, err)
	}
	for i, n := range names {
		if mg.Fences[i] <= before[i] {
			t.Errorf("fence of %q = %d, want > %d", n, mg.Fences[i], before[i])
		}
		if g := mustRefuse(t, s, mutexReq(n, newToken(), longTTL)); g.Held != store.ModeMutex {
			t.Errorf("mutex request on multi-locked %q: Held = %v, want mutex", n, g.Held)
		}
	}
	again, err := ms.AcquireMulti(ctx, reqs)
	if err != nil || !again.Acquired || !slices.Equal(again.Fences, mg.Fences) {
		t.Errorf("AcquireMulti retried by the holder = %+v, %v; want the same fences %v", again, err, mg.Fences)
	}
	other := slices.Clone(reqs)
	otherToken := newToken()
	for i := range other {
		other[i].Token = otherToken
	}
	for i, err := range ms.ExtendMulti(ctx, other) {
		if !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("ExtendMulti by another token: %q = %v, want ErrNotHeld", names[i], err)
		}
	}
	for i, err := range ms.ReleaseMulti(ctx, other) {
		if !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("ReleaseMulti by another token: %q = %v, want ErrNotHeld", names[i], err)
		}
	}
	for i, err := range ms.ExtendMulti(ctx, reqs) {
		if err != nil {
			t.Errorf("ExtendMulti by the holder: %q = %v, want nil", names[i], err)
		}
	}
	for i, err := range ms.ReleaseMulti(ctx, reqs) {
		if err != nil {
			t.Errorf("ReleaseMulti by the holder: %q = %v, want nil", names[i], err)
		}
	}
	for i, err := range ms.ReleaseMulti(ctx, reqs) {
		if !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("second ReleaseMulti: %q = %v, want ErrNotHeld", names[i], err)
		}
	}

	// A mutex hold on the last name refuses the whole request; the name the
	// token took on its own before is given up too.
	held := mutexReq(names[2], newToken(), longTTL)
	mustAcquire(t, s, held)
	mustAcquire(t, s, reqs[0])
	mg, err = ms.AcquireMulti(ctx, reqs)
	if err != nil || mg.Acquired || mg.Refused != 2 || mg.Refusal.Held != store.ModeMutex ||
		mg.Refusal.RetryAfter <= 0 || mg.Refusal.RetryAfter > longTTL+clockSlack {
		t.Errorf("AcquireMulti while %q is held = %+v, %v; want refused at index 2, Held mutex, RetryAfter in (0, %v]", names[2], mg, err, longTTL)
	}
	for _, n := range names[:2] {
		r := mutexReq(n, newToken(), longTTL)
		mustAcquire(t, s, r) // nothing left held
		mustRelease(t, s, r)
	}
	mustRelease(t, s, held)

	// A waiter on one name gets it once the multi-lock is released.
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	ml, err := l.Multi(names).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	type result struct {
		ls  *dlock.Lease
		err error
	}
	got := make(chan result, 1)
	lw := newLocker(t, peerStore(t, h, s), dlock.WithTTL(longTTL))
	go func() {
		wctx, cancel := context.WithTimeout(ctx, waitTimeout)
		defer cancel()
		ls, err := lw.Mutex(names[1]).Lock(wctx)
		got <- result{ls, err}
	}()
	waitQueued(t, s, names[1])
	if err := ml.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("a waiter on %q after the multi-lock's release: Lock = %v", names[1], r.err)
	}
	if r.ls.Fence() <= ml.Fence(names[1]) {
		t.Errorf("waiter's fence %d, want > the multi-lock's %d", r.ls.Fence(), ml.Fence(names[1]))
	}
	r.ls.Release(ctx)
}

// waitQueued waits, on a store that reports queues ([store.Inspector]), up
// to waitTimeout for a waiter to be registered on name, so that a release
// after it exercises the handoff. On other stores it returns at once.
func waitQueued(t *testing.T, s store.Store, name string) {
	t.Helper()
	in, ok := s.(store.Inspector)
	if !ok {
		return
	}
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		st, err := in.State(testContext(t), name)
		if err == nil && st.Queue > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("no waiter registered on %q within %v; releasing anyway", name, waitTimeout)
}
