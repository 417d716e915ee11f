package valkey

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
)

var _ dlock.Broadcaster = (*Store)(nil)

const (
	// subscribeWait bounds Subscribe's wait for the server's confirmation.
	subscribeWait = time.Second
	// resubscribeDelay is the pause before subscribing again after a
	// failure.
	resubscribeDelay = 250 * time.Millisecond
)

// bus carries the Store's [dlock.Broadcaster] messages: topic T is the
// channel "<prefix>bus:T", published with SPUBLISH (PUBLISH before Redis
// 7) and heard with one subscription per channel on valkey-go's shared
// connection, whatever the number of local subscribers.
type bus struct {
	mu     sync.Mutex
	chans  map[string]*busChan
	closed bool
	legacy bool // the server lacks SPUBLISH: use PUBLISH
}

type busChan struct {
	channel string
	ready   chan struct{} // closed once subscribed
	cancel  context.CancelFunc
	done    chan struct{} // closed when the Receive loop ended

	mu   sync.Mutex // held while a subscriber's fn runs
	next int
	fns  map[int]func([]byte)
}

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
	b := &s.bus
	b.mu.Lock()
	legacy := b.legacy
	b.mu.Unlock()
	c := s.client
	cmd := c.B().Spublish().Channel(channel).Message(vk.BinaryString(msg)).Build()
	if legacy {
		cmd = c.B().Publish().Channel(channel).Message(vk.BinaryString(msg)).Build()
	}
	err = c.Do(ctx, cmd).Error()
	if ve, ok := vk.IsValkeyErr(err); ok && !legacy && unknownCommand(ve) {
		b.mu.Lock()
		b.legacy = true
		b.mu.Unlock()
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
		return nil, fmt.Errorf("dlock: valkey subscribe: store closed: %w", vk.ErrClosing)
	}
	if b.chans == nil {
		b.chans = make(map[string]*busChan)
	}
	bc := b.chans[channel]
	if bc == nil {
		bc = b.start(s, channel)
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
				b.end(s, bc)
			}
		})
	}, nil
}

// start begins the Receive loop of channel. b.mu is held.
func (b *bus) start(s *Store, channel string) *busChan {
	ctx, cancel := context.WithCancel(context.Background())
	bc := &busChan{channel: channel, ready: make(chan struct{}), cancel: cancel, done: make(chan struct{}), fns: make(map[int]func([]byte))}
	b.chans[channel] = bc
	var readyOnce sync.Once
	hctx := vk.WithOnSubscriptionHook(ctx, func(ps vk.PubSubSubscription) {
		if ps.Kind == "ssubscribe" || ps.Kind == "subscribe" {
			readyOnce.Do(func() { close(bc.ready) })
		}
	})
	go func() {
		defer close(bc.done)
		b.receive(s, bc, hctx)
	}()
	return bc
}

// receive keeps bc subscribed until it ends or the Store closes.
func (b *bus) receive(s *Store, bc *busChan, ctx context.Context) {
	c := s.client
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		b.mu.Lock()
		legacy := b.legacy
		b.mu.Unlock()
		cmd := c.B().Ssubscribe().Channel(bc.channel).Build()
		if legacy {
			cmd = c.B().Subscribe().Channel(bc.channel).Build()
		}
		err := c.Receive(ctx, cmd, func(m vk.PubSubMessage) { bc.deliver([]byte(m.Message)) })
		if ctx.Err() != nil || errors.Is(err, vk.ErrClosing) {
			return
		}
		if ve, ok := vk.IsValkeyErr(err); ok && !legacy && unknownCommand(ve) {
			b.mu.Lock()
			b.legacy = true
			b.mu.Unlock()
			continue
		}
		if err != nil {
			s.cfg.logger.Debug("dlock: broadcast subscription failed; retrying", "channel", bc.channel, "err", err)
			retry.Reset(resubscribeDelay)
			select {
			case <-retry.C:
			case <-ctx.Done():
				return
			}
		}
	}
}

func (bc *busChan) deliver(msg []byte) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for _, fn := range bc.fns {
		fn(msg)
	}
}

// end stops bc's loop, unsubscribes on the server and waits for the loop.
func (b *bus) end(s *Store, bc *busChan) {
	bc.cancel()
	b.mu.Lock()
	legacy := b.legacy
	b.mu.Unlock()
	c := s.client
	cmd := c.B().Sunsubscribe().Channel(bc.channel).Build()
	if legacy {
		cmd = c.B().Unsubscribe().Channel(bc.channel).Build()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	c.Do(ctx, cmd)
	cancel()
	<-bc.done
}

// stop ends every subscription. Called by Close.
func (b *bus) stop(s *Store) {
	b.mu.Lock()
	b.closed = true
	chans := b.chans
	b.chans = nil
	b.mu.Unlock()
	for _, bc := range chans {
		b.end(s, bc)
	}
}
