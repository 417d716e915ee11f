package goredis

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

var _ dlock.Broadcaster = (*Store)(nil)

// bus carries the Store's [dlock.Broadcaster] messages: topic T is the shard
// channel "<prefix>bus:T" (as on store/valkey, so both stores' processes
// hear each other), published with SPUBLISH (PUBLISH before Redis 7) and
// heard with one pub/sub connection per topic with local subscribers.
type bus struct {
	mu     sync.Mutex
	chans  map[string]*busChan
	closed bool
}

type busChan struct {
	ready  chan struct{} // closed once subscribed
	cancel context.CancelFunc
	done   chan struct{} // closed when the receive loop ended

	mu   sync.Mutex // held while a subscriber's fn runs
	next int
	fns  map[int]func([]byte)
}

const (
	// subscribeWait bounds Subscribe's wait for the server's confirmation.
	subscribeWait = time.Second
	// resubscribeDelay is the pause before subscribing again after a failure.
	resubscribeDelay = 250 * time.Millisecond
)

func (s *Store) busChannel(topic string) (string, error) {
	if err := dlock.ValidName(topic); err != nil {
		return "", err
	}
	return s.l.Prefix + "bus:" + topic, nil
}

// Publish implements [dlock.Broadcaster].
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

// Subscribe implements [dlock.Broadcaster]. It waits up to a second (or
// until ctx ends) for the subscription to be confirmed; a failed
// subscription is retried in the background until stop or Close.
func (s *Store) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	channel, err := s.busChannel(topic)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, &dlock.InvalidError{Field: "fn", Reason: "must not be nil"}
	}
	b := &s.bus
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, errClosed
	}
	if b.chans == nil {
		b.chans = make(map[string]*busChan)
	}
	bc := b.chans[channel]
	if bc == nil {
		bc = s.startBus(channel)
		b.chans[channel] = bc
	}
	bc.mu.Lock()
	id := bc.next
	bc.next++
	bc.fns[id] = fn
	bc.mu.Unlock()
	b.mu.Unlock()

	timer := time.NewTimer(subscribeWait)
	select {
	case <-bc.ready:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			bc.mu.Lock()
			delete(bc.fns, id)
			last := len(bc.fns) == 0
			bc.mu.Unlock()
			if last && b.chans[channel] == bc {
				delete(b.chans, channel)
			} else {
				last = false
			}
			b.mu.Unlock()
			if last {
				bc.cancel()
				<-bc.done
			}
		})
	}, nil
}

// startBus begins the receive loop of channel.
func (s *Store) startBus(channel string) *busChan {
	ctx, cancel := context.WithCancel(context.Background())
	bc := &busChan{ready: make(chan struct{}), cancel: cancel, done: make(chan struct{}), fns: make(map[int]func([]byte))}
	var readyOnce sync.Once
	ready := func() { readyOnce.Do(func() { close(bc.ready) }) }
	sub := s.grants.Sub
	go func() {
		defer close(bc.done)
		retry := time.NewTimer(time.Hour)
		retry.Stop()
		defer retry.Stop()
		for {
			err := sub.Receive(ctx, channel, ready, func(msg string) { bc.deliver([]byte(msg)) })
			if ctx.Err() != nil || sub.Closed(err) {
				return
			}
			if err != nil {
				s.cfg.logger.Debug("dlock: broadcast subscription failed; retrying", "channel", channel, "err", err)
				retry.Reset(resubscribeDelay)
				select {
				case <-retry.C:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return bc
}

func (bc *busChan) deliver(msg []byte) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for _, fn := range bc.fns {
		fn(msg)
	}
}

// stop ends every subscription and waits for their loops. Called by Close.
func (b *bus) stop() {
	b.mu.Lock()
	b.closed = true
	chans := b.chans
	b.chans = nil
	b.mu.Unlock()
	for _, bc := range chans {
		bc.cancel()
		<-bc.done
	}
}
