package goredis

import (
	"context"
	"fmt"

	"github.com/dlock-dev/dlock/store"
)

var _ store.Broadcaster = (*Store)(nil)

// The Store's [store.Broadcaster] messages on topic T travel on the shard
// channel "<prefix>bus:T" (as on store/valkey, so both stores' processes
// hear each other), published with SPUBLISH (PUBLISH before Redis 7) and
// heard with one pub/sub connection per topic with local subscribers
// (redisproto.Bus).

func (s *Store) busChannel(topic string) (string, error) {
	if err := store.ValidName(topic); err != nil {
		return "", err
	}
	return s.l.Prefix + "bus:" + topic, nil
}

// Publish implements [store.Broadcaster].
func (s *Store) Publish(ctx context.Context, topic string, msg []byte) error {
	channel, err := s.busChannel(topic)
	if err != nil {
		return err
	}
	sub := s.grants.Sub.(*subscriber)
	sub.mu.Lock()
	legacy := sub.legacy
	sub.mu.Unlock()
	if !legacy {
		err = s.client.SPublish(ctx, channel, msg).Err()
		if err != nil && unknownCommand(err) {
			sub.mu.Lock()
			sub.legacy = true
			sub.mu.Unlock()
			legacy = true
		}
	}
	if legacy {
		err = s.client.Publish(ctx, channel, msg).Err()
	}
	if err != nil {
		return fmt.Errorf("dlock: goredis publish: %w", err)
	}
	return nil
}

// Subscribe implements [store.Broadcaster]. It waits up to a second (or
// until ctx ends) for the subscription to be confirmed; a failed
// subscription is retried in the background until stop or Close.
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
		return nil, errClosed
	}
	return stop, nil
}
