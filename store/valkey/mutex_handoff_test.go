package valkey_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// handoffStore counts the Acquire calls made through a Store; it keeps
// the Store's WatchGrant (embedded), so a Locker on it waits for handoffs.
type handoffStore struct {
	*valkey.Store
	acquires atomic.Int64
}

func (c *handoffStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	c.acquires.Add(1)
	return c.Store.Acquire(ctx, req)
}

// raw runs a command through s's client (routed by key on a cluster).
func raw(t *testing.T, s *valkey.Store, args ...string) vk.ValkeyResult {
	t.Helper()
	c := s.Client()
	return c.Do(prototest.Context(t), c.B().Arbitrary(args...).Build())
}

func rawGet(t *testing.T, s *valkey.Store, key string) string {
	t.Helper()
	v, err := raw(t, s, "GET", key).ToString()
	if err != nil && !vk.IsValkeyNil(err) {
		t.Fatalf("GET %s = %v", key, err)
	}
	return v
}

func rawZcard(t *testing.T, s *valkey.Store, key string) int64 {
	t.Helper()
	n, err := raw(t, s, "ZCARD", key).AsInt64()
	if err != nil {
		t.Fatalf("ZCARD %s = %v", key, err)
	}
	return n
}

// waitFor polls cond (which reads the server) every few milliseconds until
// it holds, and fails t after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type lockResult struct {
	i     int
	lease *dlock.Lease
	err   error
}

// TestMutexHandoffWakesOne checks the mutex handoff on one node and on a
// cluster: with N registered waiters, each release hands the lock to exactly
// one of them, which wakes holding it without another Acquire; the key then
// holds exactly that waiter's token (SET NX clients stay excluded); and the
// fences increase.
func TestMutexHandoffWakesOne(t *testing.T) {
	t.Run("node", func(t *testing.T) {
		srv := testredis.Start(t)
		testMutexHandoffWakesOne(t, func(t *testing.T) *valkey.Store { return dial(t, srv.URL()) })
	})
	t.Run("cluster", func(t *testing.T) {
		c := testredis.StartCluster(t, 3)
		url := "redis://" + strings.Join(c.Addrs(), ",")
		testMutexHandoffWakesOne(t, func(t *testing.T) *valkey.Store { return dial(t, url) })
	})
}

func testMutexHandoffWakesOne(t *testing.T, newStore func(t *testing.T) *valkey.Store) {
	const waiters = 4
	ctx := prototest.Context(t)
	// Long TTLs: no waiter's timer (refresh, holder expiry) fires during the
	// test, so any Acquire counted below would be a wake-up's.
	opts := []dlock.Option{dlock.WithTTL(time.Minute), dlock.WithQueueTTL(time.Minute)}
	hs := newStore(t)
	holder, err := prototest.NewLocker(t, hs, opts...).Mutex("handoff").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	wkey := hs.AuxKey("handoff", "waiters")
	stores := make([]*handoffStore, waiters)
	results := make(chan lockResult, waiters)
	for i := range stores {
		stores[i] = &handoffStore{Store: newStore(t)}
		m := prototest.NewLocker(t, stores[i], opts...).Mutex("handoff")
		go func() {
			ls, err := m.Lock(ctx)
			results <- lockResult{i, ls, err}
		}()
	}
	waitFor(t, "every waiter registered", func() bool { return rawZcard(t, hs, wkey) == waiters })
	counts := func() (n int64) {
		for _, s := range stores {
			n += s.acquires.Load()
		}
		return n
	}
	before := counts()

	prev, release := holder.Fence(), holder.Release
	for round := range waiters {
		if err := release(ctx); err != nil {
			t.Fatalf("round %d: Release = %v", round, err)
		}
		r := <-results
		if r.err != nil {
			t.Fatalf("round %d: Lock = %v", round, r.err)
		}
		if got := counts(); got != before {
			t.Errorf("round %d: %d Acquire calls after the release, want 0 (the waiter wakes holding the lock)", round, got-before)
		}
		if got := rawGet(t, hs, "lock:handoff"); got != r.lease.Token() {
			t.Errorf("round %d: GET lock:handoff = %q, want the new holder's token", round, got)
		}
		if r.lease.Fence() <= prev {
			t.Errorf("round %d: fence %d after %d, want it to increase", round, r.lease.Fence(), prev)
		}
		if ok, err := raw(t, hs, "SET", "lock:handoff", "other", "NX", "PX", "60000").ToString(); err == nil || ok == "OK" {
			t.Errorf("round %d: SET NX on the handed-over key = %q, %v; want nil", round, ok, err)
		}
		if n := rawZcard(t, hs, wkey); n != int64(waiters-1-round) {
			t.Errorf("round %d: %d registrations left, want %d", round, n, waiters-1-round)
		}
		select {
		case r2 := <-results:
			t.Fatalf("round %d: a second waiter returned: %+v", round, r2)
		default:
		}
		prev, release = r.lease.Fence(), r.lease.Release
	}
	if err := release(ctx); err != nil {
		t.Fatalf("last Release = %v", err)
	}
	if got := rawGet(t, hs, "lock:handoff"); got != "" {
		t.Errorf("GET lock:handoff after the last release = %q, want none", got)
	}
}

// TestMutexWaiterGivesUp checks that a waiter whose ctx ends leaves no
// registration behind, and that a TryLock never registers.
func TestMutexWaiterGivesUp(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	l := prototest.NewLocker(t, s, dlock.WithTTL(time.Minute))
	holder, err := l.Mutex("gives-up").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wkey := s.AuxKey("gives-up", "waiters")
	if _, err := l.Mutex("gives-up").TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock of a held lock = %v, want ErrLocked", err)
	}
	if n := rawZcard(t, s, wkey); n != 0 {
		t.Errorf("a TryLock left %d registrations, want 0", n)
	}

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := prototest.NewLocker(t, dial(t, srv.URL())).Mutex("gives-up").Lock(wctx)
		done <- err
	}()
	waitFor(t, "the waiter registered", func() bool { return rawZcard(t, s, wkey) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, dlock.ErrLocked) || !errors.Is(err, context.Canceled) {
		t.Errorf("Lock after cancel = %v, want ErrLocked and context.Canceled", err)
	}
	if n := rawZcard(t, s, wkey); n != 0 {
		t.Errorf("a waiter that gave up left %d registrations, want 0", n)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rawGet(t, s, "lock:gives-up"); got != "" {
		t.Errorf("GET lock:gives-up after release = %q, want none (no handoff to a waiter that left)", got)
	}
}

// TestMutexHandoffStore checks the store's side: a Queue acquire registers
// only a token whose handoff this Store listens for; a handed-over waiter
// asking again gets the grant it was pushed (how a lost push is recovered);
// a Release by a registered token drops its registration, and once handed
// over frees the lock.
func TestMutexHandoffStore(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	wkey := s.AuxKey("store", "waiters")
	hold := store.Request{Name: "store", Token: "holder", TTL: time.Minute}
	if g, err := s.Acquire(ctx, hold); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	w := store.Request{Name: "store", Token: "waiter", TTL: 30 * time.Second, Queue: true, QueueTTL: time.Minute}
	if g, err := s.Acquire(ctx, w); err != nil || g.Acquired {
		t.Fatalf("Acquire(waiter) = %+v, %v; want refused", g, err)
	}
	if n := rawZcard(t, s, wkey); n != 0 {
		t.Fatalf("a Queue acquire without WatchGrant registered (%d), want not", n)
	}

	grants, stop, err := s.WatchGrant(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if g, err := s.Acquire(ctx, w); err != nil || g.Acquired {
		t.Fatalf("Acquire(waiter) = %+v, %v; want refused", g, err)
	}
	if n := rawZcard(t, s, wkey); n != 1 {
		t.Fatalf("%d registrations, want 1", n)
	}
	// Registering again refreshes, and does not add.
	s.Acquire(ctx, w)
	if n := rawZcard(t, s, wkey); n != 1 {
		t.Fatalf("%d registrations after a refresh, want 1", n)
	}
	if st, err := s.State(ctx, "store"); err != nil || st.Mode != store.ModeMutex || st.Holders != 1 || st.Queue != 1 {
		t.Errorf("State = %+v, %v; want a held mutex with 1 waiter", st, err)
	}
	if err := s.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	g := <-grants
	if !g.Acquired || g.Fence <= 0 {
		t.Fatalf("pushed grant = %+v", g)
	}
	if got := rawGet(t, s, "lock:store"); got != "waiter" {
		t.Errorf("GET lock:store = %q, want waiter", got)
	}
	if pttl, _ := raw(t, s, "PTTL", "lock:store").AsInt64(); pttl <= 20000 || pttl > 30000 {
		t.Errorf("PTTL after handoff = %d, want the waiter's TTL (30000)", pttl)
	}
	again, err := s.Acquire(ctx, w)
	if err != nil || !again.Acquired || again.Fence != g.Fence {
		t.Errorf("Acquire by the handed-over waiter = %+v, %v; want its grant with fence %d", again, err, g.Fence)
	}
	if err := s.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	if got := rawGet(t, s, "lock:store"); got != "" {
		t.Errorf("GET lock:store after the new holder's release = %q, want none", got)
	}

	// A registration dropped by Release.
	if g, err := s.Acquire(ctx, hold); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	s.Acquire(ctx, w)
	if n := rawZcard(t, s, wkey); n != 1 {
		t.Fatalf("%d registrations, want 1", n)
	}
	if err := s.Release(ctx, w); err != nil {
		t.Errorf("Release of a registration = %v, want nil", err)
	}
	if err := s.Release(ctx, w); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("second Release of a registration = %v, want ErrNotHeld", err)
	}
	if n := rawZcard(t, s, wkey); n != 0 {
		t.Errorf("%d registrations after Release, want 0", n)
	}
	if err := s.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	if got := rawGet(t, s, "lock:store"); got != "" {
		t.Errorf("GET lock:store = %q, want none", got)
	}
}

// TestMutexAbandonedRegistration checks that a registration whose waiter
// died (its Store closed without cleanup) is skipped once its queue TTL has
// passed by the server's clock: the lock goes to a live waiter, or is freed.
func TestMutexAbandonedRegistration(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	wkey := s.AuxKey("abandoned", "waiters")
	hold := store.Request{Name: "abandoned", Token: "holder", TTL: time.Minute}

	// register makes a waiter on a Store of its own that then "dies".
	register := func(token string) {
		t.Helper()
		d, err := valkey.Dial(ctx, srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		req := store.Request{Name: "abandoned", Token: token, TTL: time.Minute, Queue: true, QueueTTL: 200 * time.Millisecond}
		if _, _, err := d.WatchGrant(ctx, req); err != nil {
			t.Fatal(err)
		}
		if g, err := d.Acquire(ctx, req); err != nil || g.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v; want refused", token, g, err)
		}
	}
	// expired waits until n registrations' deadlines are past by the
	// server's clock.
	expired := func(n int64) {
		t.Helper()
		waitFor(t, "the dead registrations to expire", func() bool {
			now, err := raw(t, s, "TIME").AsStrSlice()
			if err != nil || len(now) != 2 {
				t.Fatalf("TIME = %v, %v", now, err)
			}
			sec, _ := strconv.ParseInt(now[0], 10, 64)
			usec, _ := strconv.ParseInt(now[1], 10, 64)
			ms := strconv.FormatInt(sec*1000+usec/1000, 10)
			got, _ := raw(t, s, "ZCOUNT", wkey, "-inf", ms).AsInt64()
			return got >= n
		})
	}

	// Only a dead waiter: the release frees the lock.
	if g, err := s.Acquire(ctx, hold); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	register("dead-1")
	if n := rawZcard(t, s, wkey); n != 1 {
		t.Fatalf("%d registrations, want 1", n)
	}
	expired(1)
	if err := s.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	if got := rawGet(t, s, "lock:abandoned"); got != "" {
		t.Errorf("GET lock:abandoned = %q, want none (a dead registration is skipped)", got)
	}
	if n := rawZcard(t, s, wkey); n != 0 {
		t.Errorf("%d registrations left, want 0", n)
	}

	// A dead waiter ahead of a live one: the live one gets the lock.
	if g, err := s.Acquire(ctx, hold); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	register("dead-2")
	results := make(chan lockResult, 1)
	go func() {
		ls, err := prototest.NewLocker(t, dial(t, srv.URL()), dlock.WithQueueTTL(time.Minute)).Mutex("abandoned").Lock(ctx)
		results <- lockResult{0, ls, err}
	}()
	waitFor(t, "the live waiter registered", func() bool { return rawZcard(t, s, wkey) == 2 })
	expired(1)
	if err := s.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	r := <-results
	if r.err != nil {
		t.Fatalf("Lock = %v", r.err)
	}
	if got := rawGet(t, s, "lock:abandoned"); got != r.lease.Token() {
		t.Errorf("GET lock:abandoned = %q, want the live waiter's token", got)
	}
	if n := rawZcard(t, s, wkey); n != 0 {
		t.Errorf("%d registrations left, want 0", n)
	}
	r.lease.Release(ctx)
}

// TestMutexWaiterNotHandedOver checks that registered waiters still get a
// lock that no handoff gives them: released by a foreign client (a plain
// DEL, which hands nothing over; noticed at the waiter's next refresh, a
// third of its queue TTL) or expired (noticed at the holder's expiry).
func TestMutexWaiterNotHandedOver(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	for _, tc := range []struct {
		name string
		opts []dlock.Option
		hold string // ms
		end  func(key string)
	}{
		{"foreign release", []dlock.Option{dlock.WithQueueTTL(300 * time.Millisecond)}, "60000", func(key string) { mustDo(t, srv, "DEL", key) }},
		{"expiry", []dlock.Option{dlock.WithQueueTTL(time.Minute)}, "2000", func(string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			key := "lock:" + name
			mustDo(t, srv, "SET", key, "foreign", "NX", "PX", tc.hold)
			results := make(chan lockResult, 1)
			go func() {
				ls, err := prototest.NewLocker(t, dial(t, srv.URL()), tc.opts...).Mutex(name).Lock(ctx)
				results <- lockResult{0, ls, err}
			}()
			waitFor(t, "the waiter registered", func() bool { return rawZcard(t, s, s.AuxKey(name, "waiters")) == 1 })
			tc.end(key)
			r := <-results
			if r.err != nil {
				t.Fatalf("Lock = %v", r.err)
			}
			if got := rawGet(t, s, key); got != r.lease.Token() {
				t.Errorf("GET %s = %q, want the waiter's token", key, got)
			}
			if n := rawZcard(t, s, s.AuxKey(name, "waiters")); n != 0 {
				t.Errorf("%d registrations left, want 0", n)
			}
			r.lease.Release(ctx)
		})
	}
}

// TestMutexHandoffNotWithWaitReplicas: a handoff is announced before any
// WAIT could confirm it, so a Store that waits for replicas watches for
// handoffs of neither mode: the mutex is not handed over, and a fair
// waiter takes the lock handed to it by an Acquire (TestWaitReplicasFairHandoff).
func TestMutexHandoffNotWithWaitReplicas(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL(), valkey.WithWaitReplicas(1, 100*time.Millisecond))
	for _, m := range []store.Mode{store.ModeMutex, store.ModeFair} {
		req := store.Request{Name: "replicated", Token: "w", TTL: time.Minute, Mode: m, Queue: true, QueueTTL: time.Minute}
		if _, _, err := s.WatchGrant(prototest.Context(t), req); !errors.Is(err, store.ErrNotSupported) {
			t.Errorf("WatchGrant(%v) with WithWaitReplicas = %v, want ErrNotSupported", m, err)
		}
	}
}
