package valkey

import (
	"context"
	"errors"
	"fmt"
	"sync"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/store"
)

var _ store.GrantWatcher = (*Store)(nil)

// Handoffs of the fair lock and of the mutex to registered waiters reach a
// Store on its own shard channel per lock (redisproto.Handoffs). The
// subscriptions ride on valkey-go's shared connection (RESP3 push).

// WatchGrant implements [store.GrantWatcher] for the fair lock and the
// mutex: the channel receives the Grant when a release (or, for the fair
// lock, an acquire finding the holder's lease run out) hands the lock to
// req.Token. It waits, up to a second or until ctx ends, for the lock's
// subscription to be confirmed, so that a handoff right after the caller
// queues is not missed. It returns an error wrapping [store.ErrNotSupported]
// for the other modes, and for both under [WithWaitReplicas]: the release
// script announces a handoff before any WAIT could confirm it, so there a
// waiter learns of its grant by its next Acquire, whose WAIT does (the fair
// lock is still handed to the head of its queue inside the release; the
// mutex, whose waiters then do not register, is not handed over).
//
// A mutex Acquire with req.Queue registers its token as a waiter only while
// a WatchGrant of this Store waits for that token; otherwise Queue is
// ignored, so that no lock is handed to a token nobody listens for.
func (s *Store) WatchGrant(ctx context.Context, req store.Request) (<-chan store.Grant, func(), error) {
	if req.Mode != store.ModeFair && req.Mode != store.ModeMutex {
		return nil, nil, fmt.Errorf("%w: valkey store grant watch for mode %v", store.ErrNotSupported, req.Mode)
	}
	if s.cfg.waitReplicas > 0 {
		// A handoff is announced before any WAIT: its waiter would hold a
		// grant no replica confirmed.
		return nil, nil, fmt.Errorf("%w: valkey store %v handoff with WithWaitReplicas", store.ErrNotSupported, req.Mode)
	}
	if err := s.checkName(req.Name); err != nil {
		return nil, nil, err
	}
	ch, stop, ok := s.grants.Watch(ctx, s.l.GrantChannel(req.Name, req.Mode), req.Token)
	if !ok {
		return nil, nil, fmt.Errorf("dlock: valkey watch: store closed: %w", vk.ErrClosing)
	}
	return ch, stop, nil
}

// watching reports whether a WatchGrant of this Store waits for a handoff
// of lock name (mode m) to token, on a confirmed subscription.
func (s *Store) watching(name string, m store.Mode, token string) bool {
	return s.grants.Watching(s.l.GrantChannel(name, m), token)
}

// setSubscriber makes the handoffs and the broadcast bus subscribe through
// s.client.
func (s *Store) setSubscriber() {
	sub := &subscriber{c: s.client}
	s.grants.Sub, s.bus.Sub = sub, sub
}

// subscriber is redisproto.Subscriber on valkey-go: SSUBSCRIBE, or
// SUBSCRIBE on a server without it.
type subscriber struct {
	c      vk.Client
	mu     sync.Mutex
	legacy bool // the server lacks SSUBSCRIBE: use SUBSCRIBE
}

func (p *subscriber) isLegacy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.legacy
}

func (p *subscriber) Receive(ctx context.Context, channel string, ready func(), onMessage func(string)) error {
	hctx := vk.WithOnSubscriptionHook(ctx, func(ps vk.PubSubSubscription) {
		if ps.Kind == "ssubscribe" || ps.Kind == "subscribe" {
			ready()
		}
	})
	legacy := p.isLegacy()
	cmd := p.c.B().Ssubscribe().Channel(channel).Build()
	if legacy {
		cmd = p.c.B().Subscribe().Channel(channel).Build()
	}
	err := p.c.Receive(hctx, cmd, func(m vk.PubSubMessage) { onMessage(m.Message) })
	if ve, ok := vk.IsValkeyErr(err); ok && !legacy && unknownCommand(ve) {
		p.mu.Lock()
		p.legacy = true
		p.mu.Unlock()
		return nil // subscribe again, the old way
	}
	return err
}

func (p *subscriber) Unsubscribe(ctx context.Context, channel string) {
	cmd := p.c.B().Sunsubscribe().Channel(channel).Build()
	if p.isLegacy() {
		cmd = p.c.B().Unsubscribe().Channel(channel).Build()
	}
	p.c.Do(ctx, cmd)
}

func (p *subscriber) Closed(err error) bool { return errors.Is(err, vk.ErrClosing) }
