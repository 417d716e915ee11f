package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	"github.com/dlock-dev/dlock/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T, endpoint string, opts ...etcd.Option) *etcd.Store {
	t.Helper()
	s, err := etcd.New(t.Context(), []string{endpoint}, opts...)
	if err != nil {
		t.Fatalf("etcd.New(%q) = %v", endpoint, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) store.Store { return newStore(t, srv.Endpoint()) },
		Restart: func(t *testing.T) { srv.Restart(t) },
	})
	t.Run("Model", func(t *testing.T) {
		storetest.RunModel(t, storetest.Harness{
			New: func(t *testing.T) store.Store { return newStore(t, srv.Endpoint()) },
		}, storetest.ModelConfig{
			// Sub-second TTLs end when this store's reaper revokes their
			// lease, late on a loaded machine.
			Tolerance: 500 * time.Millisecond,
			// Each acquisition of a reentrant hold is a key on its own lease:
			// a re-entry with a longer TTL does not keep the first one.
			ReentrantApart: true,
			// A name freed by another pattern is claimed by the fair
			// queue's head at its own next Acquire: a fair Acquire by a
			// caller that is not queued does not claim it for the head.
			LazyHandoff: true,
		})
	})
}

func TestStore(t *testing.T) {
	srv := etcdtest.Start(t)

	t.Run("HoldEndsWithItsLeaseWhenTheProcessIsGone", func(t *testing.T) {
		a := newStore(t, srv.Endpoint())
		b := newStore(t, srv.Endpoint())
		ctx := t.Context()
		held := store.Request{Name: "gone", Token: "a", TTL: time.Second}
		if g, err := a.Acquire(ctx, held); err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v; want a grant", g, err)
		}
		a.Close() // the holder's process is gone: only etcd's lease is left
		start := time.Now()
		other := store.Request{Name: "gone", Token: "b", TTL: time.Minute}
		for {
			g, err := b.Acquire(ctx, other)
			if err != nil {
				t.Fatalf("Acquire = %v", err)
			}
			if g.Acquired {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("lock still held 10s after its holder's 1s lease was left to etcd")
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("free %v after the holder went away (etcd lease of 1s)", time.Since(start))
		if errs := b.Extend(ctx, []store.Request{held}); !errors.Is(errs[0], store.ErrNotHeld) {
			t.Errorf("Extend of the expired session's hold = %v, want ErrNotHeld", errs[0])
		}
	})

	t.Run("UnavailableWhenServerDown", func(t *testing.T) {
		down := etcdtest.Start(t)
		s := newStore(t, down.Endpoint())
		down.Kill()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := s.Acquire(ctx, store.Request{Name: "down", Token: "a", TTL: time.Second})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Acquire with the server down = %v, want ErrUnavailable", err)
		}
	})
}
