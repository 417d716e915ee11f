package valkey

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
)

var _ dlock.GrantWatcher = (*Store)(nil)

// grantSubs delivers handoffs (of the fair lock, and of the mutex to a
// registered waiter) to the waiters of one Store. Each Store has a random
// ID, and a waiter queues with the name of its Store's channel for the lock,
// "{tag}:fair:ch:<ID>" or "{tag}:mutex:ch:<ID>". The release script that
// hands the lock to a waiter publishes "<sha1hex(token)> <fence>" on that
// channel (SPUBLISH; PUBLISH before Redis 7), so only the waiter's Store
// hears of it. The Store keeps one subscription per lock name (and mode)
// with local waiters, on valkey-go's shared connection (RESP3 push), and
// passes each message to the one waiter whose token it names: a release
// wakes one waiter, which learns its grant without another round trip. A
// subscription outlives its last waiter by grantLinger, so a process that
// takes the same lock again and again subscribes once.
type grantSubs struct {
	idOnce sync.Once
	id     string // random, names this Store's channels
	// mutexSuffix and fairSuffix end the channels' names (see grantChannel).
	mutexSuffix, fairSuffix string

	mu     sync.Mutex
	subs   map[string]*grantSub // by channel
	closed bool
	wg     sync.WaitGroup // Receive loops and lingering unsubscribes
	legacy bool           // the server lacks SSUBSCRIBE: use SUBSCRIBE
}

type grantSub struct {
	channel string
	waiters map[string]chan dlock.Grant // by sha1hex(token)
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
)

// WatchGrant implements [dlock.GrantWatcher] for the fair lock and the
// mutex: the channel receives the Grant when a release (or, for the fair
// lock, an acquire finding the holder's lease run out) hands the lock to
// req.Token. It waits, up to a second or until ctx ends, for the lock's
// subscription to be confirmed, so that a handoff right after the caller
// queues is not missed. It returns an error wrapping [dlock.ErrNotSupported]
// for the other modes, and for the mutex under [WithWaitReplicas] (a
// handoff is not confirmed by replicas, so waiters then retry instead).
//
// A mutex Acquire with req.Queue registers its token as a waiter only while
// a WatchGrant of this Store waits for that token; otherwise Queue is
// ignored, so that no lock is handed to a token nobody listens for.
func (s *Store) WatchGrant(ctx context.Context, req dlock.Request) (<-chan dlock.Grant, func(), error) {
	if req.Mode != dlock.ModeFair && req.Mode != dlock.ModeMutex {
		return nil, nil, fmt.Errorf("%w: valkey store grant watch for mode %v", dlock.ErrNotSupported, req.Mode)
	}
	if req.Mode == dlock.ModeMutex && s.cfg.waitReplicas > 0 {
		// A handoff is not followed by WAIT: its waiter would hold a grant
		// no replica confirmed.
		return nil, nil, fmt.Errorf("%w: valkey store mutex handoff with WithWaitReplicas", dlock.ErrNotSupported)
	}
	if err := s.checkName(req.Name); err != nil {
		return nil, nil, err
	}
	g := &s.grants
	channel := s.grantChannel(req.Name, req.Mode)
	id := tokenID(req.Token)
	ch := make(chan dlock.Grant, 1)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, nil, fmt.Errorf("dlock: valkey watch: store closed: %w", vk.ErrClosing)
	}
	if g.subs == nil {
		g.subs = make(map[string]*grantSub)
	}
	sub := g.subs[channel]
	if sub == nil {
		sub = g.subscribe(s, channel)
	} else if sub.linger != nil {
		sub.linger.Stop()
		sub.linger = nil
	}
	sub.waiters[id] = ch
	g.mu.Unlock()

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
			g.mu.Lock()
			defer g.mu.Unlock()
			if sub.waiters[id] == ch {
				delete(sub.waiters, id)
			}
			if len(sub.waiters) == 0 && !g.closed && g.subs[channel] == sub && sub.linger == nil {
				sub.linger = time.AfterFunc(grantLinger, func() { g.drop(s, sub) })
			}
		})
	}
	return ch, stop, nil
}

// grantChannel is the channel of lock name (of mode m, ModeFair or
// ModeMutex) on which this Store hears of handoffs to its waiters.
func (s *Store) grantChannel(name string, m dlock.Mode) string {
	return s.aux(name, s.grantSuffix(m))
}

// grantSuffix is the auxiliary key suffix of grantChannel.
func (s *Store) grantSuffix(m dlock.Mode) string {
	g := &s.grants
	g.idOnce.Do(func() {
		var b [8]byte
		rand.Read(b[:])
		g.id = hex.EncodeToString(b[:])
		g.mutexSuffix, g.fairSuffix = "mutex:ch:"+g.id, "fair:ch:"+g.id
	})
	if m == dlock.ModeMutex {
		return g.mutexSuffix
	}
	return g.fairSuffix
}

// watching reports whether a WatchGrant of this Store waits for a handoff
// of lock name (mode m) to token, on a confirmed subscription.
func (s *Store) watching(name string, m dlock.Mode, token string) bool {
	channel := s.grantChannel(name, m)
	g := &s.grants
	g.mu.Lock()
	sub := g.subs[channel]
	ok := sub != nil && sub.waiters[tokenID(token)] != nil
	g.mu.Unlock()
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

// tokenID is what a handoff message names a waiter by.
func tokenID(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:])
}

// subscribe starts the Receive loop of channel. g.mu is held.
func (g *grantSubs) subscribe(s *Store, channel string) *grantSub {
	ctx, cancel := context.WithCancel(context.Background())
	sub := &grantSub{
		channel: channel,
		waiters: make(map[string]chan dlock.Grant),
		ready:   make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
	}
	g.subs[channel] = sub
	var readyOnce sync.Once
	hctx := vk.WithOnSubscriptionHook(ctx, func(ps vk.PubSubSubscription) {
		if ps.Kind == "ssubscribe" || ps.Kind == "subscribe" {
			readyOnce.Do(func() { close(sub.ready) })
		}
	})
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.receive(s, sub, hctx)
	}()
	return sub
}

// receive keeps sub subscribed until it is dropped or the Store closes.
func (g *grantSubs) receive(s *Store, sub *grantSub, ctx context.Context) {
	c := s.client
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		g.mu.Lock()
		legacy := g.legacy
		g.mu.Unlock()
		cmd := c.B().Ssubscribe().Channel(sub.channel).Build()
		if legacy {
			cmd = c.B().Subscribe().Channel(sub.channel).Build()
		}
		err := c.Receive(ctx, cmd, func(m vk.PubSubMessage) { g.deliver(sub, m.Message) })
		if ctx.Err() != nil || errors.Is(err, vk.ErrClosing) {
			return
		}
		if ve, ok := vk.IsValkeyErr(err); ok && !legacy && strings.Contains(strings.ToLower(ve.Error()), "unknown command") {
			g.mu.Lock()
			g.legacy = true
			g.mu.Unlock()
			continue
		}
		if err != nil {
			s.cfg.logger.Debug("dlock: fair-lock subscription failed; retrying", "channel", sub.channel, "err", err)
			retry.Reset(armRetry)
			select {
			case <-retry.C:
			case <-ctx.Done():
				return
			}
		}
		// err == nil: unsubscribed, by a drop of an earlier subscription
		// to the same channel on this connection; subscribe again.
	}
}

// deliver passes a handoff message to the waiter it names.
func (g *grantSubs) deliver(sub *grantSub, msg string) {
	id, f, ok := strings.Cut(msg, " ")
	if !ok {
		return
	}
	fence, err := strconv.ParseInt(f, 10, 64)
	if err != nil {
		return
	}
	g.mu.Lock()
	ch := sub.waiters[id]
	g.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- dlock.Grant{Acquired: true, Fence: fence, Count: 1}:
	default:
	}
}

// drop ends a subscription that nobody waited on for grantLinger.
func (g *grantSubs) drop(s *Store, sub *grantSub) {
	g.mu.Lock()
	if g.closed || g.subs[sub.channel] != sub || len(sub.waiters) > 0 {
		g.mu.Unlock()
		return
	}
	delete(g.subs, sub.channel)
	g.wg.Add(1)
	g.mu.Unlock()
	defer g.wg.Done()
	g.unsubscribe(s, sub)
}

// unsubscribe ends sub's Receive loop and its subscription on the server.
func (g *grantSubs) unsubscribe(s *Store, sub *grantSub) {
	sub.cancel()
	c := s.client
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	g.mu.Lock()
	legacy := g.legacy
	g.mu.Unlock()
	cmd := c.B().Sunsubscribe().Channel(sub.channel).Build()
	if legacy {
		cmd = c.B().Unsubscribe().Channel(sub.channel).Build()
	}
	c.Do(ctx, cmd)
}

// stop ends every subscription and waits for their loops. Called by Close.
func (g *grantSubs) stop(s *Store) {
	g.mu.Lock()
	g.closed = true
	subs := g.subs
	g.subs = nil
	for _, sub := range subs {
		if sub.linger != nil {
			sub.linger.Stop()
		}
	}
	g.mu.Unlock()
	for _, sub := range subs {
		g.unsubscribe(s, sub)
	}
	g.wg.Wait()
}
