package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	dlockgoredis "github.com/dlock-dev/dlock/store/goredis"
)

// TestGoredisInteropPeers is the migration guide's claim for teams on
// go-redis: on one server, through one go-redis client, a lock held by
// redsync or bsm/redislock refuses dlock's store/goredis with the peer's
// remaining TTL, dlock takes it once the peer releases, and a dlock hold
// refuses both peers until dlock releases.
func TestGoredisInteropPeers(t *testing.T) {
	c := startCluster(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rc := goredis.NewClient(&goredis.Options{Addr: c.addrs()[0]})
	defer rc.Close()
	st, err := dlockgoredis.New(rc)
	if err != nil {
		t.Fatalf("goredis.New = %v", err)
	}
	defer st.Close()
	l, err := dlock.New(st)
	if err != nil {
		t.Fatalf("dlock.New = %v", err)
	}
	defer l.Close()
	rs := redsync.New(rsgoredis.NewPool(rc))
	rl := redislock.New(rc)

	// A peer holds "lock:<name>" (dlock's default prefix is "lock:").
	peers := []struct {
		name   string
		take   func(key string) (release func() error, err error)
		refuse func(key string) error // nil when the peer is refused
	}{
		{
			name: "redsync",
			take: func(key string) (func() error, error) {
				m := rs.NewMutex(key, redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func() error { _, err := m.UnlockContext(ctx); return err }, nil
			},
			refuse: func(key string) error {
				m := rs.NewMutex(key, redsync.WithTries(1))
				if err := m.LockContext(ctx); err == nil {
					m.UnlockContext(ctx)
					return errors.New("redsync took a lock dlock holds")
				}
				return nil
			},
		},
		{
			name: "redislock",
			take: func(key string) (func() error, error) {
				lk, err := rl.Obtain(ctx, key, 10*time.Second, nil)
				if err != nil {
					return nil, err
				}
				return func() error { return lk.Release(ctx) }, nil
			},
			refuse: func(key string) error {
				lk, err := rl.Obtain(ctx, key, time.Second, &redislock.Options{RetryStrategy: redislock.NoRetry()})
				if err == nil {
					lk.Release(ctx)
					return errors.New("redislock took a lock dlock holds")
				}
				if !errors.Is(err, redislock.ErrNotObtained) {
					return err
				}
				return nil
			},
		},
	}
	for _, p := range peers {
		name := "interop-" + p.name
		release, err := p.take("lock:" + name)
		if err != nil {
			t.Fatalf("%s: take = %v", p.name, err)
		}
		_, err = l.Mutex(name).TryLock(ctx)
		var le *dlock.LockedError
		if !errors.As(err, &le) || le.RetryAfter <= 0 || le.RetryAfter > 10*time.Second {
			t.Errorf("%s holds: dlock TryLock = %v, want a *LockedError with RetryAfter in (0, 10s]", p.name, err)
		}
		if err := release(); err != nil {
			t.Fatalf("%s: release = %v", p.name, err)
		}
		ls, err := l.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("after %s released: dlock TryLock = %v", p.name, err)
		}
		if err := p.refuse("lock:" + name); err != nil {
			t.Errorf("dlock holds: %v", err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Errorf("dlock Release = %v", err)
		}
		if r, err := p.take("lock:" + name); err != nil {
			t.Errorf("after dlock released: %s take = %v", p.name, err)
		} else {
			r()
		}
	}
}
