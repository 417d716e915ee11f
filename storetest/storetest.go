// Package storetest is the conformance suite every [store.Store] must pass,
// in the manner of testing/fstest: a store's own tests call [Run] with a
// [Harness] that makes stores on the backend under test.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New: func(t *testing.T) store.Store { return memory.New() },
//		})
//	}
//
// The mutex suites check, on the Store itself and through a [dlock.Locker]
// on it: mutual exclusion among 16 goroutines (and among several Lockers),
// with strictly increasing fences in grant order; expiry at the TTL and not
// before; that an expired hold cannot be extended back; release and extend
// only by the token holder, leaving the holder's lease untouched; ErrNotHeld
// for unknown tokens; Extend batches answered request by request; the same
// fence and a refreshed TTL for a retried Acquire; RetryAfter within the
// holder's real remaining time; Watch woken by a release; waiters woken on
// release and on expiry; Lock ending with its ctx as an error matching both
// ErrLocked and ctx.Err(), leaving nothing behind; lease loss (Extend,
// auto-renewal, Locker.Do's ctx); an auto-renewed lease outliving its TTL;
// Inspector state without tokens; names of every valid shape (including
// shared Redis Cluster hash tags) as distinct locks; invalid names refused
// before the store is asked. With [Harness.Restart], fences stay above
// every earlier fence across a restart that loses all data. Further suites
// cover the reentrant, read-write, fair and semaphore modes; a store lists
// the modes it does not support in [Harness.Unsupported]. The hold suite
// checks, in every supported mode, a hold's record (Holder, Data, Since in
// State.Owners and List, gone with the hold, bad records refused), its
// MinHold and MaxHold kept by the store, [store.Resumer] and
// [store.ForceReleaser].
//
// Safety properties are checked exactly. Timing properties (expiry,
// wake-ups, RetryAfter) are checked with tolerances generous enough for a
// loaded machine, and no speed is asserted; latencies are logged with
// t.Logf (go test -v shows them).
//
// The suites, and the tests of each suite, run in parallel (as many tests at
// once as go test's -parallel allows) on lock names no other test uses
// (unique across runs too), so a Harness may share one backend between all
// the stores it makes, and between runs. The restart test, when
// [Harness.Restart] is set, runs first and alone: every suite starts after
// it. Run takes a few seconds.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// Harness describes the backend under test.
type Harness struct {
	// New returns a store on the backend under test. It is called once per
	// test (and again after Restart); stores may share one backend. Closing
	// the store, if needed, is New's business (t.Cleanup).
	New func(t *testing.T) store.Store
	// Restart, when set, restarts the backend losing all its data (a
	// non-persistent node). The suite then checks that fences stay
	// monotonic across the restart. After Restart the suite calls New
	// again for the stores it uses.
	Restart func(t *testing.T)
	// Unsupported lists the modes the store documents as unsupported. The
	// suite checks that Acquire in such a mode returns an error wrapping
	// [store.ErrNotSupported], and skips the suites of those modes.
	Unsupported []store.Mode
	// QueuedWriterHolds tells that a writer whose intent reaches the head
	// of the queue is handed the name (store/zookeeper), so no refusal
	// comes from a writer's intent alone; the checks of that refusal are
	// skipped.
	QueuedWriterHolds bool
	// DefaultsHolder tells that the store records a holder of its own for
	// a request without one (cmd/dlock's HTTP store: the service records
	// the caller), so a hold taken without a record need not show Owner
	// ""; the suite still checks that it shows no earlier hold's record.
	DefaultsHolder bool
	// NoResume tells that the store cannot take back a hold by its token
	// (store.Resumer): cmd/dlock's HTTP store, a client of the service, which
	// resumes on its own an extend of a lease it does not know. The hold
	// suite's Resume tests are skipped; every other store must resume.
	NoResume bool
}

func (h Harness) supports(m store.Mode) bool { return !slices.Contains(h.Unsupported, m) }

type suite struct {
	name string
	mode store.Mode
	fn   func(t *testing.T, h Harness)
}

// suites is initialised before any init function runs, so the mutex suites
// come first and suites registered from init functions follow in order.
var suites = []suite{
	{"Mutex", store.ModeMutex, testMutexStore},
	{"MutexLocker", store.ModeMutex, testMutexLocker},
}

// register adds a suite that Run runs as the subtest name unless mode is in
// Harness.Unsupported. Call it from an init function. The suite's own
// subtests should call parallel(t) and use lockName(t) for every lock.
func register(name string, mode store.Mode, fn func(t *testing.T, h Harness)) {
	suites = append(suites, suite{name, mode, fn})
}

// restartCheck issues one exclusive grant in its mode on name and returns
// the fence, failing t when the store refuses or fails.
type restartCheck struct {
	mode  store.Mode
	grant func(t *testing.T, s store.Store, name string) int64
}

var restartChecks = []restartCheck{{store.ModeMutex, grantMutex}}

// registerRestart adds an exclusive mode to the restart test: grant must
// take and give back one exclusive hold on name (with a fresh token) and
// return its fence. The restart test calls it before and after
// Harness.Restart and expects the first fence after the restart to exceed
// every fence before it.
func registerRestart(mode store.Mode, grant func(t *testing.T, s store.Store, name string) int64) {
	restartChecks = append(restartChecks, restartCheck{mode, grant})
}

// Run runs the conformance suite against the stores h.New makes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("storetest: Harness.New is nil")
	}
	for _, m := range h.Unsupported {
		t.Run("Unsupported/"+m.String(), func(t *testing.T) { testUnsupported(t, h, m) })
	}
	for _, s := range suites {
		t.Run(s.name, func(t *testing.T) {
			if !h.supports(s.mode) {
				t.Skipf("mode %v is unsupported by this store", s.mode)
			}
			// The suites run at once, after Restart: a parallel subtest
			// waits here until Run returns. No more tests run at once for
			// that than go test's -parallel allows (a suite waiting on its
			// own tests holds no place), so they overlap only their waits.
			parallel(t)
			s.fn(t, h)
		})
	}
	t.Run("Restart", func(t *testing.T) {
		if h.Restart == nil {
			t.Skip("Harness.Restart is not set")
		}
		testRestart(t, h)
	})
}

// testUnsupported checks that the store refuses mode m with an error
// wrapping store.ErrNotSupported.
func testUnsupported(t *testing.T, h Harness, m store.Mode) {
	s := h.New(t)
	ctx := testContext(t)
	req := store.Request{Name: lockName(t), Token: newToken(), TTL: 10 * time.Second, Mode: m, Limit: 2}
	g, err := s.Acquire(ctx, req)
	if g.Acquired {
		s.Release(ctx, req)
	}
	if !errors.Is(err, store.ErrNotSupported) {
		t.Errorf("Acquire(mode %v) = %+v, %v; want an error wrapping ErrNotSupported", m, g, err)
	}
}

// testRestart takes grants in every supported exclusive mode, restarts the
// backend and checks that the first fence after the restart is above every
// fence before it (the hybrid clock floor of DESIGN §3).
func testRestart(t *testing.T, h Harness) {
	var checks []restartCheck
	for _, c := range restartChecks {
		if h.supports(c.mode) {
			checks = append(checks, c)
		}
	}
	names := make([]string, len(checks))
	before := make([]int64, len(checks))
	s := h.New(t)
	for i, c := range checks {
		names[i] = lockName(t)
		for range 20 {
			f := c.grant(t, s, names[i])
			if f <= before[i] {
				t.Fatalf("mode %v: fence %d after fence %d; want strictly increasing", c.mode, f, before[i])
			}
			before[i] = f
		}
	}
	h.Restart(t)
	s = h.New(t)
	for i, c := range checks {
		if f := c.grant(t, s, names[i]); f <= before[i] {
			t.Errorf("mode %v: first fence after restart = %d, want > %d (the last fence before it)", c.mode, f, before[i])
		} else {
			t.Logf("mode %v: fence %d before restart, %d after", c.mode, before[i], f)
		}
	}
}

// grantMutex is the restart check of ModeMutex.
func grantMutex(t *testing.T, s store.Store, name string) int64 {
	t.Helper()
	ctx := testContext(t)
	req := mutexReq(name, newToken(), 10*time.Second)
	g := mustAcquire(t, s, req)
	if err := s.Release(ctx, req); err != nil {
		t.Fatalf("Release(%q) = %v, want nil", name, err)
	}
	return g.Fence
}

// Tolerances. Waits for something that must happen use waitTimeout, far
// longer than it should take. Clock comparisons between the store and the
// test allow clockSlack for millisecond rounding.
const (
	waitTimeout = 10 * time.Second
	clockSlack  = 10 * time.Millisecond
	// longTTL is a lease that never runs out during a test.
	longTTL = 30 * time.Second
)

var (
	runID   = randHex(4)
	nameSeq atomic.Int64
)

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newToken returns a fresh 128-bit token.
func newToken() string { return randHex(16) }

// lockName returns a lock name that no other test, and no other run of the
// suite on a shared backend, uses. It ends with the test's own name.
func lockName(t *testing.T) string {
	base := t.Name()
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	if len(base) > 64 {
		base = base[:64]
	}
	return fmt.Sprintf("storetest-%s-%d-%s", runID, nameSeq.Add(1), base)
}

// parallel marks a suite's subtest as parallel with its siblings.
func parallel(t *testing.T) { t.Parallel() }

// testContext returns a context that ends with the test, or after a minute
// so that a hung store fails the test instead of the whole binary.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mutexReq(name, token string, ttl time.Duration) store.Request {
	return store.Request{Name: name, Token: token, TTL: ttl, Mode: store.ModeMutex}
}

// mustAcquire acquires req and fails t unless it was granted.
func mustAcquire(t *testing.T, s store.Store, req store.Request) store.Grant {
	t.Helper()
	g, err := s.Acquire(testContext(t), req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire(%q) = %+v, %v; want a grant", req.Name, g, err)
	}
	if g.Fence <= 0 {
		t.Errorf("Acquire(%q) fence = %d, want > 0", req.Name, g.Fence)
	}
	return g
}

// mustRefuse acquires req and fails t unless it was refused.
func mustRefuse(t *testing.T, s store.Store, req store.Request) store.Grant {
	t.Helper()
	ctx := testContext(t)
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v, want a refusal", req.Name, err)
	}
	if g.Acquired {
		s.Release(ctx, req)
		t.Fatalf("Acquire(%q) = %+v, want a refusal (the lock is held)", req.Name, g)
	}
	return g
}

// newLocker returns a Locker on s that is closed when the test ends.
func newLocker(t *testing.T, s store.Store, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l, err := dlock.New(s, opts...)
	if err != nil {
		t.Fatalf("dlock.New = %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitClosed waits up to waitTimeout for ch to close and reports whether it
// did.
func waitClosed(ch <-chan struct{}) bool {
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		return false
	}
}

// isClosed reports whether ch is closed now.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// acquireWhenFree polls Acquire for req until it is granted, failing t
// after waitTimeout. Between refusals it waits for the refusal's RetryAfter
// (at most 20ms) so that it asks again soon after the hold ends. It
// returns the grant and the time the granting call returned.
func acquireWhenFree(t *testing.T, s store.Store, req store.Request) (store.Grant, time.Time) {
	t.Helper()
	ctx := testContext(t)
	deadline := time.Now().Add(waitTimeout)
	for {
		g, err := s.Acquire(ctx, req)
		now := time.Now()
		if err != nil {
			t.Fatalf("Acquire(%q) = %v", req.Name, err)
		}
		if g.Acquired {
			return g, now
		}
		if now.After(deadline) {
			t.Fatalf("Acquire(%q) still refused after %v (RetryAfter %v)", req.Name, waitTimeout, g.RetryAfter)
		}
		time.Sleep(min(max(g.RetryAfter, time.Millisecond), 20*time.Millisecond))
	}
}

// spyStore wraps a store to count calls and report refusals, so a test
// can tell when a waiter has asked and been refused.
type spyStore struct {
	store.Store
	calls   atomic.Int64
	refused chan struct{} // receives after each refused Acquire (never blocks)
	queued  chan struct{} // receives after each refused Acquire with Queue set
}

func newSpy(s store.Store) *spyStore {
	return &spyStore{Store: s, refused: make(chan struct{}, 1), queued: make(chan struct{}, 1)}
}

// store returns the spy as a Store with the optional interfaces of the
// wrapped store that change how a Locker waits, so that tests through the
// spy take the same paths as tests on the store itself.
func (s *spyStore) store() store.Store {
	if gw, ok := s.Store.(store.GrantWatcher); ok {
		return spyGrantStore{s, gw}
	}
	return s
}

type spyGrantStore struct {
	*spyStore
	gw store.GrantWatcher
}

func (s spyGrantStore) WatchGrant(ctx context.Context, req store.Request) (<-chan store.Grant, func(), error) {
	s.calls.Add(1)
	return s.gw.WatchGrant(ctx, req)
}

func (s *spyStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	s.calls.Add(1)
	g, err := s.Store.Acquire(ctx, req)
	if err == nil && !g.Acquired {
		select {
		case s.refused <- struct{}{}:
		default:
		}
		if req.Queue {
			select {
			case s.queued <- struct{}{}:
			default:
			}
		}
	}
	return g, err
}

func (s *spyStore) Extend(ctx context.Context, reqs []store.Request) []error {
	s.calls.Add(1)
	return s.Store.Extend(ctx, reqs)
}

func (s *spyStore) Release(ctx context.Context, req store.Request) error {
	s.calls.Add(1)
	return s.Store.Release(ctx, req)
}

func (s *spyStore) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	s.calls.Add(1)
	return s.Store.Watch(ctx, name, mode)
}

// drain forgets refusals seen earlier.
func (s *spyStore) drain() {
	for _, ch := range []chan struct{}{s.refused, s.queued} {
		select {
		case <-ch:
		default:
		}
	}
}

// waitWaiting waits until a waiter has been refused and, on a store that
// hands locks to registered waiters (store.GrantWatcher), until it has
// registered (a refused Acquire with Queue set; up to 2s, since a Locker
// may wait without registering).
func (s *spyStore) waitWaiting(t *testing.T) {
	t.Helper()
	s.waitRefused(t)
	if _, ok := s.Store.(store.GrantWatcher); !ok {
		return
	}
	timer := time.NewTimer(2 * time.Second)
	defer timer.Stop()
	select {
	case <-s.queued:
	case <-timer.C:
		t.Logf("the waiter did not register as a queued waiter within 2s")
	}
}

// waitRefused waits up to waitTimeout for the spy to see a refusal.
func (s *spyStore) waitRefused(t *testing.T) {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case <-s.refused:
	case <-timer.C:
		t.Fatalf("no refused Acquire within %v", waitTimeout)
	}
}
