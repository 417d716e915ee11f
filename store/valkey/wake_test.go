package valkey_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// countingStore counts Acquire calls and signals the first refusal.
type countingStore struct {
	store.Store
	calls   atomic.Int32
	once    sync.Once
	refused chan struct{}
}

func newCountingStore(s store.Store) *countingStore {
	return &countingStore{Store: s, refused: make(chan struct{})}
}

func (c *countingStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	c.calls.Add(1)
	g, err := c.Store.Acquire(ctx, req)
	if err == nil && !g.Acquired {
		c.once.Do(func() { close(c.refused) })
	}
	return g, err
}

// roundTrip is the median of 21 PINGs through s, for the logs.
func roundTrip(t *testing.T, s *valkey.Store) time.Duration {
	d := make([]time.Duration, 21)
	for i := range d {
		start := time.Now()
		if err := s.Ping(prototest.Context(t)); err != nil {
			t.Fatalf("Ping = %v", err)
		}
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// waiterResult is what a Lock in a goroutine returned, and when.
type waiterResult struct {
	lease *dlock.Lease
	err   error
	at    time.Time
}

// startWaiter runs Lock on name through a Locker on s whose backoff steps
// are far too long to matter (uniform in [0, 30s)), so that a quick grant
// can only come from a server wake-up. It returns once the waiter's first
// attempt was refused.
func startWaiter(t *testing.T, s store.Store, name string) (*countingStore, <-chan waiterResult) {
	cs := newCountingStore(s)
	l := prototest.NewLocker(t, cs, dlock.WithBackoff(30*time.Second, time.Minute))
	res := make(chan waiterResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ls, err := l.Mutex(name).Lock(ctx)
		res <- waiterResult{ls, err, time.Now()}
	}()
	select {
	case <-cs.refused:
	case r := <-res:
		t.Fatalf("Lock(%q) = %v, %v before the lock was released", name, r.lease, r.err)
	}
	return cs, res
}

func waitGrant(t *testing.T, res <-chan waiterResult) waiterResult {
	t.Helper()
	r := <-res
	if r.err != nil {
		t.Fatalf("waiter's Lock = %v, want a lease (woken by the server)", r.err)
	}
	t.Cleanup(func() { r.lease.Release(context.Background()) })
	return r
}

// TestWakeOnRelease: a Lock waiter on one client is woken by the server when
// a holder on another client releases, and takes the lock within about a
// round trip of the push, not a backoff step.
func TestWakeOnRelease(t *testing.T) {
	srv := testredis.Start(t)
	testWakeOnRelease(t, srv.URL())
}

// TestWakeOnReleaseCluster is TestWakeOnRelease on a 3-master cluster: the
// tracked read and the push come from the node that owns the key.
func TestWakeOnReleaseCluster(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	testWakeOnRelease(t, "redis://"+strings.Join(c.Addrs(), ","))
}

func testWakeOnRelease(t *testing.T, url string) {
	holderStore, waiterStore := dial(t, url), dial(t, url)
	rtt := roundTrip(t, waiterStore)
	ctx := prototest.Context(t)

	holder := prototest.NewLocker(t, holderStore, dlock.WithTTL(time.Minute))
	for _, name := range []string{"x", "y", "z"} {
		ls, err := holder.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%s) = %v", name, err)
		}
		cs, res := startWaiter(t, waiterStore, name)
		released := time.Now()
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("Release = %v", err)
		}
		returned := time.Now()
		r := waitGrant(t, res)
		if r.lease.Fence() <= ls.Fence() {
			t.Errorf("waiter's fence = %d, want > %d", r.lease.Fence(), ls.Fence())
		}
		t.Logf("%s: waiter acquired %v after the release call began (%v after it returned); one round trip ≈ %v; %d acquire calls",
			name, r.at.Sub(released), r.at.Sub(returned), rtt, cs.calls.Load())
	}
}

// TestOpenChainsHook: Open keeps the caller's own invalidation hook working
// next to the store's.
func TestOpenChainsHook(t *testing.T) {
	srv := testredis.Start(t)
	var calls atomic.Int32
	opt := vk.ClientOption{
		InitAddress:     []string{srv.Addr()},
		OnInvalidations: func([]vk.ValkeyMessage) { calls.Add(1) },
	}
	s, err := valkey.Open(prototest.Context(t), opt)
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	mustDo(t, srv, "SET", "lock:x", "foreign", "NX", "PX", "60000")
	_, res := startWaiter(t, s, "x")
	waitTracked(t, srv) // else the store's tracked read may find the key gone
	mustDo(t, srv, "DEL", "lock:x")
	waitGrant(t, res)
	// The store's hook runs first and may wake the waiter before the
	// caller's hook is called: wait for it.
	for deadline := time.Now().Add(10 * time.Second); calls.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the caller's OnInvalidations was never called")
		}
	}
}

// TestWakeOnForeignDelete: a key held and deleted by a foreign client
// (plain SET NX PX / DEL) wakes dlock's waiters too.
func TestWakeOnForeignDelete(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	mustDo(t, srv, "SET", "lock:x", "foreign", "NX", "PX", "60000")
	cs, res := startWaiter(t, s, "x")
	waitTracked(t, srv) // so that the wake-up is the server's push
	deleted := time.Now()
	mustDo(t, srv, "DEL", "lock:x")
	r := waitGrant(t, res)
	t.Logf("waiter acquired %v after the foreign DEL was sent; %d acquire calls", r.at.Sub(deleted), cs.calls.Load())
}

// TestWatchWokenOnExpiry: the server's push on expiry wakes a watcher, with
// no Locker timer involved.
func TestWatchWokenOnExpiry(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	set := time.Now()
	mustDo(t, srv, "SET", "lock:x", "foreign", "NX", "PX", "300")
	wake, stop, err := s.Watch(ctx, "x", store.ModeMutex)
	if err != nil {
		t.Fatalf("Watch = %v", err)
	}
	defer stop()
	select {
	case <-wake:
		t.Logf("watcher woken %v after the key's 300ms TTL ran out", time.Since(set)-300*time.Millisecond)
	case <-time.After(10 * time.Second):
		t.Fatal("watcher not woken within 10s of the key's expiry")
	}
	if got, err := srv.Do("EXISTS", "lock:x"); err != nil || got != "0" {
		t.Errorf("EXISTS lock:x after the wake-up = %q, %v; want 0", got, err)
	}
}

// TestWatchRearms: tracking is one-shot on the server; the store re-arms it,
// so a waiter is woken by every change, not only the first.
func TestWatchRearms(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	mustDo(t, srv, "SET", "lock:x", "a", "PX", "60000")
	wake, stop, err := s.Watch(ctx, "x", store.ModeMutex)
	if err != nil {
		t.Fatalf("Watch = %v", err)
	}
	defer stop()
	for i, v := range []string{"b", "c", "d"} {
		// Wait until the key is tracked again: the server counts tracked keys.
		waitTracked(t, srv)
		drain(wake)
		mustDo(t, srv, "SET", "lock:x", v, "PX", "60000")
		select {
		case <-wake:
		case <-time.After(10 * time.Second):
			t.Fatalf("change %d: watcher not woken within 10s", i+1)
		}
	}
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// waitTracked waits until the server tracks at least one key for a client.
func waitTracked(t *testing.T, srv *testredis.Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info := mustDo(t, srv, "INFO", "stats")
		if n := infoInt(info, "tracking_total_keys"); n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the server tracks no key after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNewWithoutHook: a Store over a client built by the caller cannot get
// the server's pushes; its waiters are still woken by releases through the
// same Store, and find a foreign release by their timer and backoff.
func TestNewWithoutHook(t *testing.T) {
	srv := testredis.Start(t)
	client, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatalf("NewClient = %v", err)
	}
	t.Cleanup(client.Close)
	s, err := valkey.New(client)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := prototest.Context(t)

	l := prototest.NewLocker(t, s)
	ls, err := l.Mutex("x").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock = %v", err)
	}
	_, res := startWaiter(t, s, "x")
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	waitGrant(t, res)

	// Foreign holder: the waiter's timer at the remaining TTL takes it.
	mustDo(t, srv, "SET", "lock:y", "foreign", "NX", "PX", "300")
	l2 := prototest.NewLocker(t, s)
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ls2, err := l2.Mutex("y").Lock(lctx)
	if err != nil {
		t.Fatalf("Lock(y) after a foreign 300ms hold = %v", err)
	}
	ls2.Release(ctx)

	// Closing the Store leaves the caller's client open.
	s.Close()
	if err := client.Do(ctx, client.B().Ping().Build()).Error(); err != nil {
		t.Errorf("PING on the caller's client after Store.Close = %v, want nil", err)
	}
}

// TestNewWithoutHookObserve: on a Store that gets no server pushes, Watch of
// an election is not supported, so Election.Observe polls (every maximum
// backoff) and still sees a leader elected through another Store, and the
// end of its leadership.
func TestNewWithoutHookObserve(t *testing.T) {
	srv := testredis.Start(t)
	client, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatalf("NewClient = %v", err)
	}
	t.Cleanup(client.Close)
	s, err := valkey.New(client)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := prototest.Context(t)
	if _, _, err := s.Watch(ctx, "e", store.ModeElection); !errors.Is(err, store.ErrNotSupported) {
		t.Errorf("Watch(election) without pushes = %v, want ErrNotSupported", err)
	}
	obs := prototest.NewLocker(t, s, dlock.WithBackoff(time.Millisecond, 50*time.Millisecond)).Election("e").Observe(ctx)
	var seen []store.Leader
	next := func(want func(store.Leader) bool) {
		t.Helper()
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		for {
			select {
			case ld, ok := <-obs:
				if !ok {
					t.Fatalf("Observe channel closed")
				}
				seen = append(seen, ld)
				if want(ld) {
					return
				}
			case <-timer.C:
				t.Fatalf("no awaited leadership change within 10s; seen %+v", seen)
			}
		}
	}
	next(func(ld store.Leader) bool { return ld.Term == 0 })
	e := prototest.NewLocker(t, dial(t, srv.URL())).Election("e")
	lease, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign = %v", err)
	}
	next(func(ld store.Leader) bool { return ld.Term == lease.Fence() && ld.Value == "a" })
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("Resign = %v", err)
	}
	next(func(ld store.Leader) bool { return ld.Term == 0 })
}

// TestTrackedAcquireRearms: a Lock waiter is woken by every change of the
// key, whoever makes it. Its refused attempts are tracked reads that keep
// the server's push armed, so the store seldom needs reads of its own
// (logged: MULTI/EXEC wraps only the store's own cached GETs).
func TestTrackedAcquireRearms(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	mustDo(t, srv, "SET", "lock:x", "a", "PX", "60000")
	cs, res := startWaiter(t, s, "x")
	for i, v := range []string{"b", "c", "d", "e"} {
		before := cs.calls.Load()
		waitTracked(t, srv)
		mustDo(t, srv, "SET", "lock:x", v, "PX", "60000")
		deadline := time.Now().Add(10 * time.Second)
		for cs.calls.Load() == before {
			if time.Now().After(deadline) {
				t.Fatalf("change %d: the waiter made no attempt within 10s", i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitTracked(t, srv)
	mustDo(t, srv, "DEL", "lock:x")
	waitGrant(t, res)
	stats := mustDo(t, srv, "INFO", "commandstats")
	t.Logf("%d acquire attempts for 5 changes; the store's own tracked reads: %d", cs.calls.Load(), cmdCalls(stats, "multi"))
}

// cmdCalls returns the calls of cmd in an INFO commandstats reply.
func cmdCalls(stats, cmd string) int64 {
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}
