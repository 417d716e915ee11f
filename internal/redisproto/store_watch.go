package redisproto

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/dlock-dev/dlock/store"
)

// Watch implements [store.Store] on the Hub: the channel receives when the
// watch key of lock name, or its main key, may have changed. For
// [store.ModeElection] and [store.ModeFair] it also receives each time the
// server tracks the watch key anew, and for elections it returns an error wrapping
// [store.ErrNotSupported] when the Hub does not run (no server pushes): a
// new leader would go unseen. ctx is not used.
func (s *Store) Watch(_ context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	o, err := s.ops(mode)
	if err != nil {
		return nil, nil, err
	}
	if err := s.l.CheckName(name); err != nil {
		return nil, nil, err
	}
	if mode == store.ModeElection && !s.hub.Running() {
		return nil, nil, fmt.Errorf("%w: %s election watch without server pushes", store.ErrNotSupported, s.name)
	}
	ch := make(chan struct{}, 1)
	key, main := o.WatchKey(s.l, name), s.l.Key(name)
	if mode == store.ModeElection || mode == store.ModeFair {
		// An observer waits for a new leader, not for a free name: it is
		// also woken whenever the server tracks the gate anew. So is a fair
		// waiter that watches rather than hears its grant: a release may
		// hand it the lock (the key stays present) after its refused
		// attempt and before the hub's tracked read, which then sees no
		// free name; the read's wake-up makes it ask again.
		s.hub.AddObserver(key, ch)
	} else {
		s.hub.Add(key, ch, s.track != nil && o.ReadsWatchKey)
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
// mutex (see [Handoffs]). It returns an error wrapping
// [store.ErrNotSupported] for the other modes, and for both when writes
// are confirmed by replicas (Config.Confirmer): the release script
// announces a handoff before any WAIT could confirm it.
func (s *Store) WatchGrant(ctx context.Context, req store.Request) (<-chan store.Grant, func(), error) {
	if req.Mode != store.ModeFair && req.Mode != store.ModeMutex {
		return nil, nil, fmt.Errorf("%w: %s store grant watch for mode %v", store.ErrNotSupported, s.name, req.Mode)
	}
	if req.Mode == store.ModeMutex && HasRecord(req) {
		// A mutex handoff grants without a record (the registration does
		// not carry one), so such a waiter is not registered (see Acquire):
		// refusing its grant watch makes it wait on Watch, woken by the
		// release, instead of for a handoff that never comes.
		return nil, nil, fmt.Errorf("%w: %s store mutex handoff with a hold record", store.ErrNotSupported, s.name)
	}
	if s.confirm != nil {
		// A handoff is announced before any WAIT: its waiter would hold a
		// grant no replica confirmed.
		return nil, nil, fmt.Errorf("%w: %s store %v handoff with writes confirmed by replicas", store.ErrNotSupported, s.name, req.Mode)
	}
	if err := s.l.CheckName(req.Name); err != nil {
		return nil, nil, err
	}
	ch, stop, ok := s.grants.Watch(ctx, s.l.GrantChannel(req.Name, req.Mode), req.Token)
	if !ok {
		return nil, nil, s.errClosed("watch")
	}
	return ch, stop, nil
}

// watching reports whether a WatchGrant of this Store waits for a handoff
// of lock name (mode m) to token, on a confirmed subscription: a mutex
// acquire registers only such a waiter.
func (s *Store) watching(name string, m store.Mode, token string) bool {
	return s.grants.Watching(s.l.GrantChannel(name, m), token)
}

// busChannel is the channel of the Store's [store.Broadcaster] messages on
// topic: "<prefix>bus:<topic>", on both stores, so that their processes
// hear each other.
func (s *Store) busChannel(topic string) (string, error) {
	if err := store.ValidName(topic); err != nil {
		return "", err
	}
	return s.l.Prefix + "bus:" + topic, nil
}

// Publish implements [store.Broadcaster]: SPUBLISH, or PUBLISH on a server
// without it.
func (s *Store) Publish(ctx context.Context, topic string, msg []byte) error {
	channel, err := s.busChannel(topic)
	if err != nil {
		return err
	}
	legacy := s.legacy.Load()
	err = s.c.Publish(ctx, channel, msg, legacy)
	if !legacy && s.unknownCommand(err) {
		s.legacy.Store(true)
		err = s.c.Publish(ctx, channel, msg, true)
	}
	if err != nil {
		return fmt.Errorf("dlock: %s publish: %w", s.name, err)
	}
	return nil
}

// Subscribe implements [store.Broadcaster] (see [Bus]).
func (s *Store) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	channel, err := s.busChannel(topic)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, &store.InvalidError{Field: "fn", Reason: "must not be nil"}
	}
	stop, ok := s.bus.Subscribe(ctx, channel, fn)
	if !ok {
		return nil, s.errClosed("subscribe")
	}
	return stop, nil
}

// unknownCommand reports whether err is the server's refusal of a command
// it does not know (SSUBSCRIBE, SPUBLISH before Redis 7).
func (s *Store) unknownCommand(err error) bool {
	msg, ok := s.c.ServerError(err)
	return ok && strings.Contains(strings.ToLower(msg), "unknown command")
}

// subscriber is the Subscriber of a Store's Handoffs and Bus: its Client,
// by SSUBSCRIBE, or SUBSCRIBE on a server without it.
type subscriber struct{ s *Store }

func (p subscriber) Receive(ctx context.Context, channel string, ready func(), onMessage func(string)) error {
	legacy := p.s.legacy.Load()
	err := p.s.c.Receive(ctx, channel, legacy, ready, onMessage)
	if !legacy && p.s.unknownCommand(err) {
		p.s.legacy.Store(true)
		return nil // subscribe again, the old way
	}
	return err
}

func (p subscriber) Unsubscribe(ctx context.Context, channel string) {
	p.s.c.Unsubscribe(ctx, channel, p.s.legacy.Load())
}

func (p subscriber) Closed(err error) bool { return p.s.c.Closed(err) }
