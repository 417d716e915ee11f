package valkey

import (
	"context"
	"fmt"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/store"
)

var _ store.Broadcaster = (*Store)(nil)

// The Store's [store.Broadcaster] messages on topic T travel on the channel
// "<prefix>bus:T", published with SPUBLISH (PUBLISH before Redis 7) and
// heard with one subscription per channel on valkey-go's shared connection,
// whatever the number of local subscribers (redisproto.Bus).

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
	legacy := sub.isLegacy()
	c := s.client
	cmd := c.B().Spublish().Channel(channel).Message(vk.BinaryString(msg)).Build()
	if legacy {
		cmd = c.B().Publish().Channel(channel).Message(vk.BinaryString(msg)).Build()
	}
	err = c.Do(ctx, cmd).Error()
	if ve, ok := vk.IsValkeyErr(err); ok && !legacy && unknownCommand(ve) {
		sub.mu.Lock()
		sub.legacy = true
		sub.mu.Unlock()
		return s.Publish(ctx, topic, msg)
	}
	if err != nil {
		return fmt.Errorf("dlock: valkey publish: %w", err)
	}
	return nil
}

func unknownCommand(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "unknown command")
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
		return nil, fmt.Errorf("dlock: valkey subscribe: store closed: %w", vk.ErrClosing)
	}
	return stop, nil
}
