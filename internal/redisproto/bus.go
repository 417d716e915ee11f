package redisproto

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Bus carries a store's store.Broadcaster messages on pub/sub channels: one
// subscription per channel with local subscribers, however many they are,
// kept until the last one stops. The zero value is not usable; set Sub and
// Log.
type Bus struct {
	Sub Subscriber
	Log *slog.Logger

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

// Subscribe calls fn with each message on channel until stop is called
// (stop waits for a call in progress). It waits up to a second (or until
// ctx ends) for the subscription to be confirmed; a failed subscription is
// retried in the background until stop or Close. It returns false after
// Close.
func (b *Bus) Subscribe(ctx context.Context, channel string, fn func([]byte)) (stop func(), ok bool) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, false
	}
	if b.chans == nil {
		b.chans = make(map[string]*busChan)
	}
	bc := b.chans[channel]
	if bc == nil {
		bc = b.start(channel)
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
				b.end(channel, bc)
			}
		})
	}, true
}

// start begins the receive loop of channel. b.mu is held.
func (b *Bus) start(channel string) *busChan {
	ctx, cancel := context.WithCancel(context.Background())
	bc := &busChan{ready: make(chan struct{}), cancel: cancel, done: make(chan struct{}), fns: make(map[int]func([]byte))}
	var readyOnce sync.Once
	ready := func() { readyOnce.Do(func() { close(bc.ready) }) }
	go func() {
		defer close(bc.done)
		retry := time.NewTimer(time.Hour)
		retry.Stop()
		defer retry.Stop()
		for {
			err := b.Sub.Receive(ctx, channel, ready, func(msg string) { bc.deliver([]byte(msg)) })
			if ctx.Err() != nil || b.Sub.Closed(err) {
				return
			}
			if err != nil {
				b.Log.Debug("dlock: broadcast subscription failed; retrying", "channel", channel, "err", err)
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

// end stops bc's loop, unsubscribes on the server and waits for the loop.
func (b *Bus) end(channel string, bc *busChan) {
	bc.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	b.Sub.Unsubscribe(ctx, channel)
	cancel()
	<-bc.done
}

// Close ends every subscription and waits for their loops.
func (b *Bus) Close() {
	b.mu.Lock()
	b.closed = true
	chans := b.chans
	b.chans = nil
	b.mu.Unlock()
	for channel, bc := range chans {
		b.end(channel, bc)
	}
}
