package dlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// markerPrefix starts every marker the Valkey/Redis stores keep in a name's
// main key while a pattern other than the mutex holds it ("dlock:read",
// "dlock:semaphore:3", ...). A mutex's key holds its token, so a token of
// that shape would be taken for another pattern's hold, and its release
// could delete one.
const markerPrefix = "dlock:"

// recordOptions returns the options that req's hold record fields set, for
// [Locker.Acquire]: each field set overrides the option.
func recordOptions(req Request) []Option {
	var opts []Option
	if req.Holder != "" {
		opts = append(opts, WithHolder(req.Holder))
	}
	if req.Data != "" {
		opts = append(opts, WithHolderData(req.Data))
	}
	if req.MinHold != 0 {
		opts = append(opts, WithMinHold(req.MinHold))
	}
	if req.MaxHold != 0 {
		opts = append(opts, WithMaxHold(req.MaxHold))
	}
	return opts
}

// Acquire is the low-level form of every pattern's TryLock and Lock, for
// code that forwards requests it did not build itself (the HTTP service, a
// remote store). It takes the lock req describes (its Name, Mode, Owner,
// Limit and Queue) with a lease of req.TTL (0: the Locker's TTL) and a
// queue entry of req.QueueTTL (0: see [WithQueueTTL]). Its hold record
// fields, when set, act as options: Holder as [WithHolder], Data as
// [WithHolderData], MinHold as [WithMinHold] and MaxHold as [WithMaxHold]
// (overriding those options); with
// wait it waits as [Mutex.Lock] does, otherwise it fails fast as
// [Mutex.TryLock] does. Options override the Locker's settings as in the
// pattern constructors.
//
// req.Token, when set, is the lease's token instead of a fresh random one:
// a retried Acquire with the same token is then idempotent (the store
// returns the same grant and refreshes its TTL). The caller must make the
// token as unguessable as the random ones (at least 128 random bits), since
// whoever knows it can extend or release the lease. Use a token for one
// lease at a time: a [Lease] obtained with it ends (released or lost) for
// the store too, whatever other Lease shares the token. A token is at most
// 256 bytes and must not start with "dlock:", the prefix of the markers the
// Valkey/Redis stores keep in a name's key while other patterns hold it.
//
// It returns what [Mutex.TryLock] and [Mutex.Lock] return, an
// [*InvalidError] naming the field ("token", "value") of a request it
// refuses, and an error wrapping [ErrNotSupported] for a mode the store
// cannot provide.
func (l *Locker) Acquire(ctx context.Context, req Request, wait bool, opts ...Option) (*Lease, error) {
	opts = opts[:len(opts):len(opts)]
	if req.TTL != 0 {
		opts = append(opts, WithTTL(req.TTL))
	}
	if req.QueueTTL != 0 {
		opts = append(opts, WithQueueTTL(req.QueueTTL))
	}
	opts = append(opts, recordOptions(req)...)
	c := l.lockConfig(opts)
	if len(req.Token) > 256 {
		return nil, invalid("token", "must be at most 256 bytes")
	}
	if strings.HasPrefix(req.Token, markerPrefix) {
		return nil, invalid("token", `must not start with "dlock:", the prefix of the stores' markers`)
	}
	if len(req.Value) > MaxValueLen {
		return nil, invalid("value", "must be at most 4096 bytes")
	}
	return l.acquire(ctx, &c, req, wait)
}

// acquire takes the lock of req, waiting until ctx ends when wait is set:
// every pattern's TryLock and Lock but Multi's come here.
func (l *Locker) acquire(ctx context.Context, c *config, req Request, wait bool) (*Lease, error) {
	if c.err != nil {
		return nil, c.err
	}
	if err := ValidName(req.Name); err != nil {
		return nil, err
	}
	if c.lockDelay > 0 && !store.SupportsLockDelay(l.store) {
		return nil, notSupported("lock-delay (the store does not end holds by its own clock)")
	}
	if err := l.holdFields(c, &req); err != nil {
		return nil, err
	}
	req.TTL = c.leaseTTL() + c.lockDelay // the store's hold; the lease is valid for leaseTTL
	own := req.Token == ""
	if own {
		req.Token = newToken()
	}
	if req.Queue {
		req.QueueTTL = c.queueTTLOrDefault()
	}
	p := &lockWait{call: call{l: l, c: c, req: req}, own: own}
	if l.cfg.observer == nil {
		return l.take(ctx, p, wait)
	}
	start := time.Now()
	ls, err := l.take(ctx, p, wait)
	ev := Event{Kind: EventAcquire, Mode: req.Mode, Name: req.Name, Duration: time.Since(start), Waited: wait,
		Context: ctx, Start: start, Attempts: p.log.n, Err: err, Owner: req.Holder}
	switch {
	case ls != nil:
		ev.Result, ev.Fence, ev.Lease = "acquired", ls.fence, ls.id
	case errors.Is(err, ctx.Err()) && ctx.Err() != nil:
		ev.Result = "canceled"
	case errors.Is(err, ErrLocked):
		ev.Result = "locked"
	case errors.Is(err, ErrInvalid):
		ev.Result = "invalid" // the caller's input, not the store
	default:
		ev.Result = "error"
	}
	l.emit(ev)
	return ls, err
}

// take chooses how the call p waits, and runs it: one attempt (TryLock);
// queued (see lockWait) from the first attempt for the fair lock; and
// watched otherwise, where a mutex of the Locker's own token turns queued
// when the store hands mutexes over: at once when it was contended lately
// (see hotNames), after its first round otherwise.
func (l *Locker) take(ctx context.Context, p *lockWait, wait bool) (*Lease, error) {
	w := newWaiter(l.store, p.c)
	defer w.close()
	switch {
	case !wait:
		p.single = true
	case p.req.Mode == ModeFair:
		p.queueFair(ctx, w)
	case p.req.Mode == ModeMutex && p.own:
		p.handoff = !l.contended.has(p.req.Name) || !p.handOver(ctx, w)
	}
	err := run(ctx, w, p, p.req.Name, !wait)
	return p.ls, err
}

// hotWindow is how long a mutex counts as contended after a waiter of the
// Locker was refused it; shorter than the Valkey store's subscription
// linger, so the grant watch of a contended mutex is usually ready.
const hotWindow = 5 * time.Second

// hotCap bounds the names remembered.
const hotCap = 1024

// hotNames remembers the mutexes that a Locker's waiters were refused
// lately. The zero value is ready to use.
type hotNames struct {
	mu sync.Mutex
	m  map[string]time.Time // name -> last refusal
}

func (h *hotNames) has(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.m[name]
	return ok && time.Since(t) < hotWindow
}

func (h *hotNames) mark(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.m == nil {
		h.m = make(map[string]time.Time)
	}
	if _, ok := h.m[name]; !ok && len(h.m) >= hotCap {
		for k, t := range h.m {
			if now.Sub(t) >= hotWindow {
				delete(h.m, k)
			}
		}
		if len(h.m) >= hotCap {
			return
		}
	}
	h.m[name] = now
}
