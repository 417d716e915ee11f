package dlock

import (
	"context"
	"errors"
	"time"
)

// Fair is an exclusive lock granted strictly in arrival order: the fair
// (FIFO) lock.
//
// Lock joins a queue kept by the store, which numbers waiters with tickets
// it assigns itself. A waiting place is a lease too: the waiter refreshes it
// every third of its queue TTL (see [WithQueueTTL]), and a waiter whose
// process died is dropped from the queue once that TTL has passed by the
// store's clock, so it delays the others by at most one queue TTL. A
// release hands the lock directly to the live head of the queue, which is
// woken already holding it (on stores implementing [GrantWatcher]); one
// release wakes one waiter.
//
// Order is arrival order at the store among waiters that stay alive; a
// waiter whose store calls fail loses its place and queues again. Like
// every lease, a fair lease may be lost; its [Lease.Fence] protects the
// resource.
type Fair struct {
	l    *Locker
	name string
	cfg  config
}

// Fair returns the fair lock called name. Options override the Locker's
// defaults for this lock; a bad option or name is reported by TryLock and
// Lock.
func (l *Locker) Fair(name string, opts ...Option) *Fair {
	return &Fair{l: l, name: name, cfg: l.lockConfig(opts)}
}

// WithQueuePosition registers fn to be told the caller's place in a fair
// lock's queue while [Fair.Lock] waits: 0 is the head, next in line. It is
// called from the waiting goroutine whenever the place changes, and must not
// block. Default none.
func WithQueuePosition(fn func(position int)) Option {
	return func(c *config) { c.onPosition = fn }
}

// TryLock makes one attempt to take the lock and does not wait or join the
// queue: it succeeds only when the lock is free and nobody is queued. It
// returns the [Lease], or a [*LockedError] (wrapping [ErrLocked]) when the
// lock is held or others wait, a [*StoreError] when the store failed, an
// [*InvalidError] for a bad name or option, or [ErrClosed].
func (f *Fair) TryLock(ctx context.Context) (*Lease, error) {
	return f.l.acquire(ctx, &f.cfg, Request{Name: f.name, Mode: ModeFair}, false)
}

// Lock joins the queue and waits until the lock is handed to the caller or
// ctx ends. When ctx ends it leaves the queue (or releases the lock if it
// was handed over meanwhile) and returns an error matching both ctx.Err()
// and [ErrLocked] (or [ErrUnavailable] when the store was failing).
func (f *Fair) Lock(ctx context.Context) (*Lease, error) {
	return f.l.acquire(ctx, &f.cfg, Request{Name: f.name, Mode: ModeFair, Queue: true}, true)
}

// waitFair is the waiting loop of the fair lock. It listens for the store
// handing the lock to its token (GrantWatcher) and otherwise refreshes its
// queue place every QueueTTL/3, or at the holder's expiry when it is next in
// line. own is set when req.Token is a fresh token of the Locker's own.
func (l *Locker) waitFair(ctx context.Context, c *config, req Request, own bool) (*Lease, error) {
	var since time.Time
	if own {
		since = time.Now()
	}
	return l.waitGrant(ctx, c, req, since, nil, nil)
}

// waitGrant is waitFair for the fair lock and for a mutex whose store hands
// it to registered waiters (waitHandoff). first and firstStop, when set, are
// a grant watch already made for req. since is a time before which no grant
// to req.Token can have been issued (before its watch began, for a token
// of this Locker's own that no earlier call used), or zero when unknown (a
// caller's token may have been queued and handed the lock before).
//
// A grant pushed on the watch counts only when it was issued after the
// current round's Acquire reached the store, so that its lease can be
// dated from that round's send. A refused round proves that no grant to
// the token was alive when it reached the store; a grant issued before then
// can only have died by running out its TTL, so it is stale only when more
// than a TTL (less drift) passed between the previous refused round's send
// and this round's answer, with no release by this waiter in between. In
// that case a pushed grant is confirmed by the next round's own Acquire
// instead (idempotent per token: it reports a hold the token was handed)
// rather than taken as it is.
func (l *Locker) waitGrant(ctx context.Context, c *config, req Request, since time.Time, first <-chan Grant, firstStop func()) (*Lease, error) {
	var (
		grants <-chan Grant
		wake   <-chan struct{}
		stop   = func() {}
	)
	watch := func() {
		stop()
		grants, wake, stop = nil, nil, func() {}
		if gw, ok := l.store.(GrantWatcher); ok {
			ch, st, err := gw.WatchGrant(ctx, req)
			if err == nil {
				grants, stop = ch, st
				return
			}
			c.logger.Debug("dlock: grant watch failed; falling back to watch", "name", req.Name, "err", err)
		}
		ch, st, err := l.store.Watch(ctx, req.Name, req.Mode)
		if err != nil {
			c.logger.Debug("dlock: watch failed; falling back to polling", "name", req.Name, "err", err)
			return
		}
		wake, stop = ch, st
	}
	if first != nil {
		grants, stop = first, firstStop
	} else {
		watch()
	}
	defer func() { stop() }()

	// since is from here on the send of the last refused round, which
	// proves the token held nothing then; zero while nothing is known.
	fresh := c.ttl - l.driftFor(c.driftFactor, c.ttl)
	bo := backoff{min: c.minBackoff, max: c.maxBackoff}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	lastPos := -1
	for {
		sent := time.Now()
		ls, g, err := l.tryOnce(ctx, c, req)
		if ls != nil {
			return ls, nil
		}
		if err != nil && !errors.Is(err, ErrUnavailable) {
			l.dropQueued(ctx, req)
			if ctx.Err() != nil && !errors.Is(err, ErrLocked) {
				err = errors.Join(&LockedError{Name: req.Name}, err)
			}
			return nil, err
		}
		delay := req.QueueTTL / 3
		trusted := false
		if err != nil {
			// tryOnce may have released the token's place or hold, so a
			// grant pushed before that release is dead: nothing is known
			// of the token until its next refused round.
			c.logger.Debug("dlock: acquire failed; retrying", "name", req.Name, "err", err)
			delay = min(delay, bo.next())
			since = time.Time{}
			if grants == nil && wake == nil {
				watch()
			}
		} else {
			trusted = !since.IsZero() && time.Since(since) < fresh
			since = sent
			bo.reset()
			if req.Mode == ModeMutex {
				l.contended.mark(req.Name)
			}
			if req.Mode == ModeFair && g.Position != lastPos {
				lastPos = g.Position
				if c.onPosition != nil {
					c.onPosition(g.Position)
				}
			}
			// A mutex waiter is not in line: any may take the lock when
			// the holder's lease runs out.
			if (g.Position == 0 || req.Mode == ModeMutex) && g.RetryAfter > 0 {
				delay = min(delay, g.RetryAfter+time.Millisecond)
			}
		}
		timer.Reset(delay)
		select {
		case hg := <-grants:
			if !hg.Acquired || !trusted {
				continue // a grant that may be stale: the next round confirms it
			}
			ls, err := l.newLease(ctx, c, req, hg, sent)
			if err == nil {
				return ls, nil
			}
			if ctx.Err() != nil {
				return nil, errors.Join(&LockedError{Name: req.Name}, ctx.Err())
			}
			// The grant came too late to be used and was released: queue
			// again.
			since = time.Time{}
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			l.dropQueued(ctx, req)
			if err == nil {
				err = &LockedError{Name: req.Name, RetryAfter: g.RetryAfter, Held: g.Held}
			}
			return nil, errors.Join(err, ctx.Err())
		}
	}
}
