package goredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/goredis"
	"github.com/dlock-dev/dlock/store/valkey"
	"github.com/dlock-dev/dlock/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis's pools reap idle connections on goroutines that end
		// a little after Close; valkey-go's cluster client closes
		// connections of dropped nodes after 5 seconds.
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

// open returns a Store on a go-redis client of addrs (a cluster when there
// are several), both closed when the test ends.
func open(t *testing.T, addrs ...string) *goredis.Store {
	t.Helper()
	var c redis.UniversalClient
	if len(addrs) == 1 {
		c = redis.NewClient(&redis.Options{Addr: addrs[0]})
	} else {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}
	return newStore(t, c)
}

// newStore returns a Store on c, both closed when the test ends.
func newStore(t *testing.T, c redis.UniversalClient) *goredis.Store {
	t.Helper()
	t.Cleanup(func() { c.Close() })
	s, err := goredis.New(c)
	if err != nil {
		t.Fatalf("goredis.New = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the conformance of a store over redisproto on one
// non-persistent redis-server through a *redis.Client, and the model.
func TestConformance(t *testing.T) {
	srv := testredis.Start(t)
	prototest.Conformance(t, srv, func(t *testing.T) store.Store { return open(t, srv.Addr()) })
	t.Run("Model", func(t *testing.T) {
		storetest.RunModel(t, storetest.Harness{
			New: func(t *testing.T) store.Store { return open(t, srv.Addr()) },
		}, storetest.ModelConfig{})
	})
}

// TestConformanceCluster runs storetest on a Redis Cluster of three masters
// through a *redis.ClusterClient.
func TestConformanceCluster(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return open(t, c.Addrs()...) },
	})
}

// TestInteropWithValkeyStore: on one server, a hold taken through the
// go-redis store refuses the valkey store in every mode, and the reverse,
// with the same Held mode and the name's one fence counter; a mutex waiter
// of one store is handed the lock by a release through the other.
func TestInteropWithValkeyStore(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	gs := open(t, srv.Addr())
	vs, err := valkey.Dial(ctx, srv.URL())
	if err != nil {
		t.Fatalf("valkey.Dial = %v", err)
	}
	t.Cleanup(func() { vs.Close() })
	stores := []struct {
		name string
		s    store.Store
	}{{"goredis", gs}, {"valkey", vs}}
	modes := []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeWrite, store.ModeFair, store.ModeSemaphore}
	for i, a := range stores {
		b := stores[1-i]
		for _, held := range modes {
			for _, asked := range modes {
				name := "interop-" + a.name + "-" + held.String() + "-" + asked.String()
				hold := store.Request{Name: name, Token: "holder-" + name, TTL: 10 * time.Second, Mode: held, Limit: 2}
				g, err := a.s.Acquire(ctx, hold)
				if err != nil || !g.Acquired {
					t.Fatalf("%s Acquire(%s, %v) = %+v, %v; want granted", a.name, name, held, g, err)
				}
				ask := store.Request{Name: name, Token: "asker-" + name, TTL: 10 * time.Second, Mode: asked, Limit: 2}
				g2, err := b.s.Acquire(ctx, ask)
				if err != nil {
					t.Fatalf("%s Acquire(%s, %v) over a %s hold = %v", b.name, name, asked, a.name, err)
				}
				if want := store.Coexist(held, asked); g2.Acquired != want {
					t.Errorf("%s Acquire(%v) over a %v hold by %s: acquired %v, want %v", b.name, asked, held, a.name, g2.Acquired, want)
				}
				if !g2.Acquired && g2.Held != held {
					t.Errorf("%s Acquire(%v) over a %v hold by %s: Held %v, want %v", b.name, asked, held, a.name, g2.Held, held)
				}
				if g2.Acquired {
					if err := b.s.Release(ctx, ask); err != nil {
						t.Errorf("%s Release(%v) = %v", b.name, asked, err)
					}
				}
				if err := a.s.Release(ctx, hold); err != nil {
					t.Errorf("%s Release(%v) = %v", a.name, held, err)
				}
				// The name's one fence counter serves both stores.
				next := store.Request{Name: name, Token: "next-" + name, TTL: time.Second, Mode: store.ModeMutex}
				g3, err := b.s.Acquire(ctx, next)
				if err != nil || !g3.Acquired || g3.Fence <= g.Fence {
					t.Errorf("%s Acquire(mutex) after the %s hold = %+v, %v; want granted with a fence above %d", b.name, a.name, g3, err, g.Fence)
				}
				b.s.Release(ctx, next)
			}
		}
	}

	// A waiter on the go-redis store is handed the mutex by a release
	// through the valkey store, and the reverse.
	for i, a := range stores {
		b := stores[1-i]
		holder := prototest.NewLocker(t, a.s)
		waiter := prototest.NewLocker(t, b.s)
		name := "handoff-from-" + a.name
		ls, err := holder.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("%s TryLock(%s) = %v", a.name, name, err)
		}
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := waiter.Mutex(name).Lock(ctx)
			if err != nil {
				t.Errorf("%s Lock(%s) = %v", b.name, name, err)
			}
			got <- l
		}()
		waitQueued(t, ctx, srv, name)
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("%s Release = %v", a.name, err)
		}
		l := <-got
		if l == nil {
			continue
		}
		if l.Fence() <= ls.Fence() {
			t.Errorf("%s waiter's fence %d, want above the holder's %d", b.name, l.Fence(), ls.Fence())
		}
		l.Release(ctx)
	}
}

// waitQueued waits until a waiter registered for a handoff of the mutex
// name, or the test's deadline.
func waitQueued(t *testing.T, ctx context.Context, srv *testredis.Server, name string) {
	t.Helper()
	for {
		n, err := srv.Do("ZCARD", "{lock:"+name+"}:waiters")
		if err == nil && n != "0" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no waiter registered on %s: %v", name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestForeignHolder: a key set with a raw SET NX PX is a held mutex for the
// go-redis store, whose RetryAfter is its PTTL, and which it never touches.
func TestForeignHolder(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	s := open(t, srv.Addr())
	if got, err := srv.Do("SET", "lock:f", "tok", "NX", "PX", "10000"); err != nil || got != "OK" {
		t.Fatalf("SET = %q, %v", got, err)
	}
	g, err := s.Acquire(ctx, store.Request{Name: "f", Token: "mine", TTL: time.Second, Mode: store.ModeMutex})
	if err != nil || g.Acquired || g.RetryAfter <= 9*time.Second || g.RetryAfter > 10*time.Second {
		t.Errorf("Acquire over a foreign key = %+v, %v; want refused, RetryAfter in (9s, 10s]", g, err)
	}
	if err := s.Release(ctx, store.Request{Name: "f", Token: "mine", Mode: store.ModeMutex}); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Release with another token = %v, want ErrNotHeld", err)
	}
	if got, _ := srv.Do("GET", "lock:f"); got != "tok" {
		t.Errorf("GET lock:f = %q, want the foreign token untouched", got)
	}
}

func TestNewRefusesNil(t *testing.T) {
	if _, err := goredis.New(nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("New(nil) = %v, want ErrInvalid", err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := goredis.New(c, goredis.WithFenceRetention(time.Millisecond)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("New(WithFenceRetention(1ms)) = %v, want ErrInvalid", err)
	}
}

// TestBroadcast runs storetest.Broadcast through two Stores on one server,
// and across the go-redis and valkey stores (the same channels).
func TestBroadcast(t *testing.T) {
	srv := testredis.Start(t)
	storetest.Broadcast(t, open(t, srv.Addr()), open(t, srv.Addr()))
	vs, err := valkey.Dial(prototest.Context(t), srv.URL())
	if err != nil {
		t.Fatalf("valkey.Dial = %v", err)
	}
	t.Cleanup(func() { vs.Close() })
	storetest.Broadcast(t, open(t, srv.Addr()), vs)
}

// TestFunctionFallback: see prototest.FunctionFallback.
func TestFunctionFallback(t *testing.T) {
	prototest.FunctionFallback(t, func(t *testing.T, url string) store.Store {
		o, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		return newStore(t, redis.NewClient(o))
	})
}
