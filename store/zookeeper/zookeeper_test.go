package zookeeper_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
	"github.com/dlock-dev/dlock/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T, addr string, opts ...zookeeper.Option) *zookeeper.Store {
	t.Helper()
	s, err := zookeeper.New(t.Context(), []string{addr}, opts...)
	if err != nil {
		t.Fatalf("zookeeper.New(%q) = %v", addr, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := zktest.Start(t)
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) store.Store { return newStore(t, srv.Addr()) },
		Restart: func(t *testing.T) { srv.Restart(t) },
		// The head of the one queue holds, a writer's intent too.
		QueuedWriterHolds: true,
	})
	t.Run("Model", func(t *testing.T) {
		storetest.RunModel(t, storetest.Harness{
			New: func(t *testing.T) store.Store { return newStore(t, srv.Addr()) },
		}, storetest.ModelConfig{
			// TTLs end when this store's reaper deletes the node, late on
			// a loaded machine.
			Tolerance: 500 * time.Millisecond,
			// One queue of nodes for every pattern.
			OneQueue: true,
			// Each acquisition of a reentrant hold keeps its own TTL.
			ReentrantApart: true,
			// Not yet: a queued writer is handed the name like a fair
			// waiter, which the model does not follow.
			NoQueue: true,
		})
	})
}

func TestStore(t *testing.T) {
	srv := zktest.Start(t)

	t.Run("TTLLongerThanSessionRefused", func(t *testing.T) {
		s := newStore(t, srv.Addr(), zookeeper.WithSessionTimeout(2*time.Second))
		_, err := s.Acquire(t.Context(), store.Request{Name: "long", Token: "a", TTL: time.Minute})
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Acquire with a TTL over the session timeout = %v, want ErrInvalid", err)
		}
	})

	t.Run("ClosedSessionFreesAtOnce", func(t *testing.T) {
		a, err := zookeeper.New(t.Context(), []string{srv.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		b := newStore(t, srv.Addr())
		ctx := t.Context()
		held := store.Request{Name: "closed", Token: "a", TTL: 30 * time.Second}
		if g, err := a.Acquire(ctx, held); err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v; want a grant", g, err)
		}
		a.Close()
		if g, err := b.Acquire(ctx, store.Request{Name: "closed", Token: "b", TTL: 30 * time.Second}); err != nil || !g.Acquired {
			t.Errorf("Acquire after the holder's session closed = %+v, %v; want a grant", g, err)
		}
	})
}

func TestSessionExpiryLosesHolds(t *testing.T) {
	srv := zktest.Start(t)
	px := newProxy(t, srv.Addr())
	s := newStore(t, px.addr(), zookeeper.WithSessionTimeout(time.Second))
	other := newStore(t, srv.Addr())
	ctx := t.Context()
	req := store.Request{Name: "expiry", Token: "a", TTL: time.Second}
	if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v; want a grant", g, err)
	}
	// Cut the holder off: the server expires its session after 1s and
	// deletes its node; another client then gets the lock.
	px.cut(true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, err := other.Acquire(ctx, store.Request{Name: "expiry", Token: "b", TTL: time.Second})
		if err == nil && g.Acquired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock still held 30s after its holder's session was cut off: %+v, %v", g, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	px.cut(false)
	for {
		errs := s.Extend(ctx, []store.Request{req})
		if errors.Is(errs[0], store.ErrNotHeld) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Extend after the session expired = %v, want ErrNotHeld", errs[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proxy forwards TCP connections to a server until cut, which drops them
// and refuses new ones until healed.
type proxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	down     bool
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func newProxy(t *testing.T, upstream string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.cut(true)
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[u] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { io.Copy(u, c); u.Close(); c.Close() })
		p.wg.Go(func() { io.Copy(c, u); u.Close(); c.Close() })
	}
}

func (p *proxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}
