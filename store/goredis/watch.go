package goredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/store"
)

// Watch implements [store.Store]. The channel receives when lock name may
// have become free: its key (or, for a pattern other than the mutex, its
// gate key or its main key: a name is one lock) was written, deleted or
// expired on the server, by any process (see the package doc, "Wake-ups").
// A holder's renewal also wakes waiters, who then find the lock still held.
// For [store.ModeElection] the channel also receives when a leader is
// elected (the election's gate key is written), and each time the server
// tracks the gate anew (after Watch and after each change), so that an
// observer who reads the leader after each wake-up misses no change. ctx
// is not used: Watch does not block. It returns an error wrapping
// [store.ErrNotSupported] for a mode this store does not run.
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	o, err := s.ops(mode)
	if err != nil {
		return nil, nil, err
	}
	if err := s.l.CheckName(name); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	key, main := o.WatchKey(s.l, name), s.l.Key(name)
	if mode == store.ModeElection {
		// An observer waits for a new leader, not for a free name: it is
		// also woken whenever the server tracks the gate anew.
		s.hub.AddObserver(key, ch)
	} else {
		s.hub.Add(key, ch, false)
	}
	if key != main {
		// A name is one lock: whatever pattern holds it, its main key
		// changes when the name frees.
		s.hub.Add(main, ch, false)
	}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.hub.Remove(key, ch)
			if key != main {
				s.hub.Remove(main, ch)
			}
		})
	}, nil
}

// WatchGrant implements [store.GrantWatcher] for the fair lock and the
// mutex: the channel receives the Grant when a release (or, for the fair
// lock, an acquire finding the holder's lease run out) made by any process
// hands the lock to req.Token. It waits, up to a second or until ctx ends,
// for the lock's subscription to be confirmed, so that a handoff right after
// the caller queues is not missed. It returns an error wrapping
// [store.ErrNotSupported] for the other modes.
//
// A mutex Acquire with req.Queue registers its token as a waiter only while
// a WatchGrant of this Store waits for that token; otherwise Queue is
// ignored, so that no lock is handed to a token nobody listens for.
func (s *Store) WatchGrant(ctx context.Context, req store.Request) (<-chan store.Grant, func(), error) {
	if req.Mode != store.ModeFair && req.Mode != store.ModeMutex {
		return nil, nil, fmt.Errorf("%w: goredis store grant watch for mode %v", store.ErrNotSupported, req.Mode)
	}
	if err := s.l.CheckName(req.Name); err != nil {
		return nil, nil, err
	}
	ch, stop, ok := s.grants.Watch(ctx, s.l.GrantChannel(req.Name, req.Mode), req.Token)
	if !ok {
		return nil, nil, errClosed
	}
	return ch, stop, nil
}

// subscriber is redisproto.Subscriber on go-redis: one pub/sub connection
// per channel, SSUBSCRIBE (routed to the channel's slot in a cluster), or
// SUBSCRIBE on a server without it.
type subscriber struct {
	c      redis.UniversalClient
	mu     sync.Mutex
	legacy bool
}

func (p *subscriber) Receive(ctx context.Context, channel string, ready func(), onMessage func(string)) error {
	p.mu.Lock()
	legacy := p.legacy
	p.mu.Unlock()
	var ps *redis.PubSub
	if legacy {
		ps = p.c.Subscribe(ctx, channel)
	} else {
		ps = p.c.SSubscribe(ctx, channel)
	}
	// go-redis reads a pub/sub connection without watching ctx: closing
	// it ends the read.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer func() {
		stop()
		ps.Close()
	}()
	for {
		m, err := ps.Receive(ctx)
		if err != nil {
			if !legacy && unknownCommand(err) {
				p.mu.Lock()
				p.legacy = true
				p.mu.Unlock()
				return nil // subscribe again, the old way
			}
			return err
		}
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "ssubscribe" || m.Kind == "subscribe" {
				ready()
			}
		case *redis.Message:
			onMessage(m.Payload)
		}
	}
}

// Unsubscribe has nothing to do: closing the channel's pub/sub connection,
// which Receive does when its ctx ends, unsubscribes it.
func (p *subscriber) Unsubscribe(context.Context, string) {}

func (p *subscriber) Closed(err error) bool { return errors.Is(err, redis.ErrClosed) }

func unknownCommand(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "unknown command")
}
