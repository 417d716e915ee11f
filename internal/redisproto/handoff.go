package redisproto

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// A Subscriber is what Handoffs needs of a client: a shard-channel
// subscription (SSUBSCRIBE, or SUBSCRIBE before Redis 7).
type Subscriber interface {
	// Receive subscribes to channel, calls ready once the server confirmed
	// the subscription and onMessage for every message, until ctx ends or
	// the subscription fails. It returns nil when the server ended the
	// subscription, and an error otherwise.
	Receive(ctx context.Context, channel string, ready func(), onMessage func(msg string)) error
	// Unsubscribe ends the subscription to channel on the server, if any.
	Unsubscribe(ctx context.Context, channel string)
	// Closed reports whether err means the client was closed.
	Closed(err error) bool
}

// Handoffs delivers handoffs (of the fair lock, and of the mutex to a
// registered waiter) to the waiters of one store. A waiter queues with the
// name of its store's channel for the lock ([Layout.GrantChannel]). The
// release script that hands the lock to a waiter publishes "<TokenID>
// <fence>" on that channel (SPUBLISH; PUBLISH before Redis 7), so only the
// waiter's store hears of it. Handoffs keeps one subscription per lock name
// (and mode) with local waiters and passes each message to the one waiter
// whose token it names: a release wakes one waiter, which learns its grant
// without another round trip. A subscription outlives its last waiter by
// grantLinger, so a process that takes the same lock again and again
// subscribes once. The zero value is not usable; set Sub and Log.
type Handoffs struct {
	Sub Subscriber
	Log *slog.Logger

	mu     sync.Mutex
	subs   map[string]*handoffSub // by channel
	closed bool
	wg     sync.WaitGroup // Receive loops and lingering unsubscribes
}

type handoffSub struct {
	channel string
	waiters map[string]chan store.Grant // by TokenID
	ready   chan struct{}               // closed once subscribed
	ctx     context.Context             // of the Receive loop
	cancel  context.CancelFunc
	linger  *time.Timer // running while nobody waits
}

const (
	// grantLinger is how long a subscription stays after its last waiter.
	grantLinger = 10 * time.Second
	// subscribeWait bounds the wait for a new subscription before queueing;
	// a waiter that queues without it learns of its grant by refreshing.
	subscribeWait = time.Second
	// resubscribeDelay is the pause before subscribing again after a failure.
	resubscribeDelay = 250 * time.Millisecond
)

// Watch returns a channel that receives the Grant when a release hands lock
// channel's lock to token, and a function that stops watching. It waits, up
// to a second or until ctx ends, for the subscription to be confirmed, so
// that a handoff right after the caller queues is not missed. It returns
// false when Close was called.
func (h *Handoffs) Watch(ctx context.Context, channel, token string) (<-chan store.Grant, func(), bool) {
	id := TokenID(token)
	ch := make(chan store.Grant, 1)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, false
	}
	if h.subs == nil {
		h.subs = make(map[string]*handoffSub)
	}
	sub := h.subs[channel]
	if sub == nil {
		sub = h.subscribe(channel)
	} else if sub.linger != nil {
		sub.linger.Stop()
		sub.linger = nil
	}
	sub.waiters[id] = ch
	h.mu.Unlock()

	timer := time.NewTimer(subscribeWait)
	select {
	case <-sub.ready:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if sub.waiters[id] == ch {
				delete(sub.waiters, id)
			}
			if len(sub.waiters) == 0 && !h.closed && h.subs[channel] == sub && sub.linger == nil {
				sub.linger = time.AfterFunc(grantLinger, func() { h.drop(sub) })
			}
		})
	}
	return ch, stop, true
}

// Watching reports whether a Watch waits for a handoff on channel to token,
// on a confirmed subscription.
func (h *Handoffs) Watching(channel, token string) bool {
	h.mu.Lock()
	sub := h.subs[channel]
	ok := sub != nil && sub.waiters[TokenID(token)] != nil
	h.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-sub.ready:
		return true
	default:
		return false
	}
}

// subscribe starts the Receive loop of channel. h.mu is held.
func (h *Handoffs) subscribe(channel string) *handoffSub {
	ctx, cancel := context.WithCancel(context.Background())
	sub := &handoffSub{
		channel: channel,
		waiters: make(map[string]chan store.Grant),
		ready:   make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
	}
	h.subs[channel] = sub
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.receive(sub)
	}()
	return sub
}

// receive keeps sub subscribed until it is dropped or the store closes.
func (h *Handoffs) receive(sub *handoffSub) {
	var readyOnce sync.Once
	ready := func() { readyOnce.Do(func() { close(sub.ready) }) }
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		err := h.Sub.Receive(sub.ctx, sub.channel, ready, func(msg string) { h.deliver(sub, msg) })
		if sub.ctx.Err() != nil || h.Sub.Closed(err) {
			return
		}
		if err != nil {
			h.Log.Debug("dlock: handoff subscription failed; retrying", "channel", sub.channel, "err", err)
			retry.Reset(resubscribeDelay)
			select {
			case <-retry.C:
			case <-sub.ctx.Done():
				return
			}
		}
		// err == nil: unsubscribed, by a drop of an earlier subscription
		// to the same channel on this connection; subscribe again.
	}
}

// deliver passes a handoff message to the waiter it names.
func (h *Handoffs) deliver(sub *handoffSub, msg string) {
	id, fence, ok := ParseHandoff(msg)
	if !ok {
		return
	}
	h.mu.Lock()
	ch := sub.waiters[id]
	h.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- store.Grant{Acquired: true, Fence: fence, Count: 1}:
	default:
	}
}

// drop ends a subscription that nobody waited on for grantLinger.
func (h *Handoffs) drop(sub *handoffSub) {
	h.mu.Lock()
	if h.closed || h.subs[sub.channel] != sub || len(sub.waiters) > 0 {
		h.mu.Unlock()
		return
	}
	delete(h.subs, sub.channel)
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	h.unsubscribe(sub)
}

// unsubscribe ends sub's Receive loop and its subscription on the server.
func (h *Handoffs) unsubscribe(sub *handoffSub) {
	sub.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h.Sub.Unsubscribe(ctx, sub.channel)
}

// Close ends every subscription and waits for their loops.
func (h *Handoffs) Close() {
	h.mu.Lock()
	h.closed = true
	subs := h.subs
	h.subs = nil
	for _, sub := range subs {
		if sub.linger != nil {
			sub.linger.Stop()
		}
	}
	h.mu.Unlock()
	for _, sub := range subs {
		h.unsubscribe(sub)
	}
	h.wg.Wait()
}
