package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-dev/dlock/store"
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
// woken already holding it (on stores implementing [store.GrantWatcher]); one
// release wakes one waiter. The store holds a handed-over lock for the
// waiter no longer than its queue TTL until the waiter claims it (Lock does
// so at once, with one more round trip when the queue TTL is shorter than
// the lease TTL), so a waiter that dies in between delays the others by at
// most one queue TTL too.
//
// Order is arrival order at the store among waiters that stay alive; a
// waiter whose store calls fail keeps its token, and its place if the store
// answers again within its queue TTL (otherwise it queues again at the
// back). Like
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
// handing the lock to its token ([store.GrantWatcher]) and otherwise
// refreshes its queue place every QueueTTL/3, or at the holder's expiry
// when it is next in line. own is set when req.Token is a fresh token of the Locker's own.
func (l *Locker) waitFair(ctx context.Context, c *config, req Request, own bool) (*Lease, error) {
	var since time.Time
	if own {
		since = time.Now()
	}
	w := newWaiter(l.store, c)
	defer w.close()
	if !w.handOver(ctx, req) {
		w.watch(ctx, req.Name, req.Mode)
	}
	return l.waitGrant(ctx, c, req, since, w)
}

// waitGrant is the wait of the fair lock and of a mutex whose store hands
// it to registered waiters (waitHandoff), over w's grant watch (or Watch).
// since is a time before which no grant to req.Token can have been issued
// (before its watch began, for a token of this Locker's own that no earlier
// call used), or zero when unknown (a caller's token may have been queued
// and handed the lock before).
//
// A grant pushed on the watch counts only when it was issued after the
// current round's Acquire reached the store, so that its lease can be
// dated from that round's send. A refused round proves that no grant to
// the token was alive when it reached the store; a grant issued before
// then can only have died by running out its TTL (the wait releases
// nothing while it goes on). So as long as every refused round was sent
// less than a TTL (less drift) after the previous one answered, since the
// watch began, no grant issued before a round can have died before it, and
// a pushed grant that follows a refused round was issued after it. Once a
// longer gap occurred (the waiter was paused, the store slow) a dead grant
// may still be on its way, however late: from then on every pushed grant
// is confirmed by the next round's own Acquire (idempotent per token: it
// reports a hold the token was handed) rather than taken as it is. Rounds
// are at most half that apart while nothing stalls.
func (l *Locker) waitGrant(ctx context.Context, c *config, req Request, since time.Time, w *waiter) (*Lease, error) {
	q := queueWait{c: c, req: req, since: since, doubt: since.IsZero(), lastPos: -1}
	q.fresh = c.leaseTTL() - l.driftFor(c.driftFactor, c.leaseTTL())
	for {
		sent := time.Now()
		ls, g, err := l.tryOnce(ctx, c, req, true)
		if ls != nil {
			return ls, nil
		}
		if err != nil && (ctx.Err() != nil || !errors.Is(err, ErrUnavailable)) {
			l.releaseBehind(ctx, c, req)                       // its place, or what the attempt may hold
			return nil, endedAfter(ctx, err, q.last, req.Name) // after ctx ended, it matches ctx.Err()
		}
		delay, trusted := q.round(l, w, sent, g, err)
		if err != nil && !w.watching() && !w.handOver(ctx, req) {
			w.watch(ctx, req.Name, req.Mode) // the watches failed before: try again
		}
		switch woke, hg := w.sleep(ctx, delay, nil); woke {
		case wokeGrant:
			if !hg.Acquired || !trusted {
				continue // a grant that may be stale: the next round confirms it
			}
			ls, err := l.newLease(ctx, c, req, hg, sent)
			if err == nil {
				return ls, nil
			}
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				l.releaseBehind(ctx, c, req)
				return nil, ended(ctx, err, req.Name)
			}
			// The grant came too late to be used: the next round asks
			// again with the same token, which renews what is still held.
			q.doubt = true
		case wokeEnded:
			l.releaseBehind(ctx, c, req)
			return nil, ended(ctx, q.last, req.Name)
		}
	}
}

// queueWait is what waitGrant keeps between rounds.
type queueWait struct {
	c       *config
	req     Request
	since   time.Time     // the send of the last refused round (at first, when the watch began)
	doubt   bool          // pushed grants need confirming: see waitGrant
	fresh   time.Duration // the TTL less drift: see waitGrant
	lastPos int           // the fair queue place last reported
	last    error         // the last round's refusal or failure
}

// round takes in the answer of the round sent at sent (a refusal g, or the
// store's failure err) and returns how long to sleep and whether a grant
// pushed during the sleep can be taken as it is.
func (q *queueWait) round(l *Locker, w *waiter, sent time.Time, g store.Grant, err error) (time.Duration, bool) {
	c, req := q.c, q.req
	delay := req.QueueTTL / 3
	if err != nil {
		// The gap to the next refused round covers this one.
		c.logger.Debug("dlock: acquire failed; retrying", "name", req.Name, "err", err)
		q.last = err
		return min(delay, w.bo.next()), false
	}
	q.last = &LockedError{Name: req.Name, RetryAfter: g.RetryAfter, Held: g.Held}
	if time.Since(q.since) >= q.fresh {
		q.doubt = true
	}
	q.since = sent
	w.bo.reset()
	if req.Mode == ModeMutex {
		l.contended.mark(req.Name)
	}
	if req.Mode == ModeFair && g.Position != q.lastPos {
		q.lastPos = g.Position
		if c.onPosition != nil {
			c.onPosition(g.Position)
		}
	}
	// A mutex waiter is not in line: any may take the lock when the
	// holder's lease runs out.
	if (g.Position == 0 || req.Mode == ModeMutex) && g.RetryAfter > 0 {
		delay = min(delay, g.RetryAfter+time.Millisecond)
	}
	return min(delay, q.fresh/2), !q.doubt && !q.windowed()
}

// windowed reports whether a fair lock handed to the waiter may be held
// for less than its TTL: the store holds a handed-over grant until the
// waiter's queue deadline at most (the claim window, so that a waiter that
// died before claiming it keeps the others waiting no longer than its
// place would have), and the waiter's next Acquire claims the whole TTL.
// With a queue TTL shorter than the hold, a pushed grant is confirmed by
// that Acquire (one more round trip) rather than taken as it is.
func (q *queueWait) windowed() bool {
	return q.req.Mode == ModeFair && q.req.QueueTTL < q.req.TTL
}
