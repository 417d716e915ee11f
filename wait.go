package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// A policy is what one way of waiting brings to the acquire loop (run):
// its attempt, the wake sources it sleeps on and its delays, and what it
// gives up when the wait does. There are three: watched and queued
// (lockWait: every pattern's Lock; queued for the fair lock and a mutex
// the store hands over) and multi (multiWait: Multi.Lock).
type policy interface {
	// attempt makes one attempt, and first takes pushed, a grant the store
	// pushed since the last round that delay said could be taken as it is,
	// if any. ok reports that it holds the lock; otherwise g is the
	// refusal of name, or err the store's failure.
	attempt(ctx context.Context, pushed store.Grant) (ok bool, g store.Grant, name string, err error)
	// arm sets up what the wait sleeps on after a round that did not end
	// it, and reports whether a new wake source began: the loop then
	// attempts again at once, so that a change between the round and the
	// watch is not missed.
	arm(ctx context.Context, w *waiter, name string, err error) bool
	// delay returns how long to sleep after the round sent at sent, and
	// whether a grant pushed meanwhile can be taken as it is.
	delay(w *waiter, sent time.Time, g store.Grant, err error) (time.Duration, bool)
	// behind gives up whatever the attempts may have left on the store (a
	// hold nobody knows of, a queue place), as the wait gives up.
	behind(ctx context.Context)
}

// run is the one acquire loop, over the wake sources of w. Each round makes
// p's attempt and applies the one rule of how a wait ends (see ended); a
// round that neither holds the lock nor ends the wait arms p's wake
// sources and sleeps on them for p's delay at most, and the next round
// takes a grant the store pushed meanwhile. With once set the first round
// ends the wait, whatever its outcome (TryLock). A wait that gives up
// leaves nothing behind (p.behind) and returns what ended says; name is
// the lock a refusal names when no round was refused.
func run(ctx context.Context, w *waiter, p policy, name string, once bool) error {
	var last error         // the wait's latest outcome: a refusal, or the store's failure
	var pushed store.Grant // a grant pushed during the last sleep, to be taken
	quick := false         // the round was made at once, after a new wake source
	for {
		sent := time.Now()
		ok, g, refusing, err := p.attempt(ctx, pushed)
		if ok {
			return nil
		}
		if err == nil {
			last = refused(refusing, g)
		}
		if over, end := ended(ctx, err, last, name); over || once {
			p.behind(ctx)
			return end
		}
		if err != nil {
			last = err
			w.log.Debug("dlock: acquire failed; retrying", "name", name, "err", err)
		}
		pushed = store.Grant{}
		if p.arm(ctx, w, refusing, err) && !quick {
			quick = true
			continue
		}
		quick = false
		delay, trusted := p.delay(w, sent, g, err)
		// A wait whose ctx ended goes round once more: its attempt sends
		// nothing and ends it.
		switch woke, g := w.sleep(ctx, delay, nil); {
		case woke == wokeWatch:
			w.bo.reset()
		case woke == wokeGrant && trusted:
			pushed = g // a grant that may be stale is left for the next round to confirm
		}
	}
}

// ended is the one rule of how a wait ends, after an outcome err (nil: a
// refusal, or nothing new) when last is the wait's latest outcome (this
// round's refusal, else the previous round's refusal or failure). It
// reports whether the wait is over (ctx ended, or err is not the store's
// failure to answer, which a wait retries) and what it returns then.
// While ctx lives that is err, or last when err is nil (the refusal of a
// single attempt). Once ctx ended it is the wait's outcome joined with
// ctx.Err(), so that it matches both: err when it tells more than ctx.Err()
// does (the store's failure, a final error), otherwise last, so that a
// refusal's RetryAfter and Held survive an attempt never sent or cut
// short, or a refusal of name when no round was refused.
func ended(ctx context.Context, err, last error, name string) (bool, error) {
	unanswered := errors.Is(err, ErrUnavailable) // the store's failure to answer
	switch {
	case ctx.Err() == nil && err == nil:
		return false, last
	case ctx.Err() == nil:
		return !unanswered, err
	case err == nil || !unanswered && errors.Is(err, ctx.Err()):
		err = last
	}
	if err == nil {
		err = refused(name, store.Grant{})
	}
	if errors.Is(err, ctx.Err()) {
		return true, err
	}
	return true, errors.Join(err, ctx.Err())
}

// refused is the error of a request of name that the store refused with g.
func refused(name string, g store.Grant) error {
	return &LockedError{Name: name, RetryAfter: g.RetryAfter, Held: g.Held}
}

// lockWait is the policy of every pattern's Lock but Multi's: watched, or
// queued once q is set.
//
// Watched: the wait is woken when the name may have become free (see
// [store.Store.Watch]), retrying with capped backoff and at the holder's
// expiry; a queued request (a writer's intent) refreshes its place every
// third of its queue TTL. A free lock is taken without watching it:
// watching costs the store work (a tracked key, a push per change), which
// only a waiter needs, so the first attempt is a plain one and the watch
// begins after it (and the next attempt follows at once).
//
// Queued: the wait is woken by the store handing the lock to its token
// ([store.GrantWatcher]), falling back to Watch, and refreshes its place
// every third of its queue TTL, or at the holder's expiry when it is next
// in line. The fair lock waits so from its first attempt. So does a mutex,
// when the store hands a released mutex straight to a registered waiter
// (the release that finds a live registration sets the lock key to that
// waiter's token and tells it, so the waiter wakes holding the lock and
// one release wakes one waiter): its request becomes a queue entry of
// QueueTTL, refreshed every third of it and dropped when the wait gives
// up. The mutex stays unfair: a lock that falls free by expiry goes to
// whoever asks first, registered or not, so every waiter also retries at
// the holder's expiry. Only a Locker's own fresh tokens wait so (a grant
// pushed for them is trusted from the start); a mutex refused to a waiter
// of the Locker lately (see hotNames) registers at the first attempt,
// others after their first refusal, so an uncontended lock costs no grant
// watch.
type lockWait struct {
	call
	own     bool       // req.Token is a fresh token of the Locker's own
	single  bool       // one attempt (TryLock): a queue place it made is the caller's to keep
	handoff bool       // a mutex that turns queued after its round, if the store hands it over
	q       *queueWait // set once queued
	ls      *Lease     // the lease, once held
}

// queueFair makes the wait of a fair lock queued from its first attempt.
func (p *lockWait) queueFair(ctx context.Context, w *waiter) {
	var since time.Time // unknown for a caller's token: queued and handed the lock before?
	if p.own {
		since = time.Now()
	}
	p.queue(since)
	if !w.handOver(ctx, p.req) {
		w.watch(ctx, p.req.Name, p.req.Mode)
	}
}

// handOver turns the wait of a mutex queued when the store can hand it
// over, and reports whether it did.
func (p *lockWait) handOver(ctx context.Context, w *waiter) bool {
	req := p.req
	req.Queue = true
	req.QueueTTL = p.c.queueTTLOrDefault()
	since := time.Now()
	if !w.handOver(ctx, req) {
		return false
	}
	p.req = req
	p.queue(since)
	return true
}

func (p *lockWait) attempt(ctx context.Context, pushed store.Grant) (bool, store.Grant, string, error) {
	if pushed.Acquired {
		// Handed over after the last refused round, sent at q.since.
		ls, err := p.l.newLease(ctx, p.c, p.req, pushed, p.q.since, p.log.unknownSince, p.floor)
		if err == nil {
			p.ls = ls
			return true, pushed, p.req.Name, nil
		}
		// Too late to be used (or ctx ended, or Close came): ask again
		// with the same token, which renews what is still held, or finds
		// the wait over and sends nothing.
		p.late, p.q.doubt = true, true
		p.lowerFloor(p.q.since)
	}
	if p.q != nil && !p.q.since.IsZero() {
		p.lowerFloor(p.q.since) // a handover since then is claimed by this try
	}
	ls, g, err := p.try(ctx)
	p.ls = ls
	return ls != nil, g, p.req.Name, err
}

func (p *lockWait) arm(ctx context.Context, w *waiter, _ string, err error) bool {
	switch {
	case p.q != nil:
		if err != nil && !w.watching() && !w.handOver(ctx, p.req) {
			w.watch(ctx, p.req.Name, p.req.Mode) // the watches failed before: try again
		}
		return false
	case p.handoff:
		p.handoff = false
		if p.handOver(ctx, w) {
			return true
		}
	}
	return w.watch(ctx, p.req.Name, p.req.Mode)
}

func (p *lockWait) delay(w *waiter, sent time.Time, g store.Grant, err error) (time.Duration, bool) {
	if p.q != nil {
		return p.queuedDelay(w, sent, g, err)
	}
	delay := w.backoffDelay(g)
	if p.req.Queue {
		delay = min(delay, p.req.QueueTTL/3)
	}
	return delay, false
}

func (p *lockWait) behind(ctx context.Context) {
	// A queue place, or what an attempt may hold. The place of a single
	// attempt is kept while ctx lives: the caller refreshes and claims it
	// by repeating the acquire with its token (docs/http.md, Queue places).
	if p.q != nil || (p.req.Queue && (!p.single || ctx.Err() != nil)) || p.mayHold() {
		p.afterwards(ctx, func(rctx context.Context) { _ = p.l.store.Release(rctx, p.req) })
	}
}

// queueWait is what a queued wait keeps between rounds.
//
// since is a time before which no grant to the token can have been issued
// (at first, before its watch began, for a token of this Locker's own that
// no earlier call used), or zero when unknown (a caller's token may have
// been queued and handed the lock before).
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
type queueWait struct {
	since   time.Time     // the send of the last refused round (at first, when the watch began)
	doubt   bool          // pushed grants need confirming
	fresh   time.Duration // the TTL less drift
	lastPos int           // the fair queue place last reported
}

func (p *lockWait) queue(since time.Time) {
	ttl := p.c.leaseTTL()
	p.q = &queueWait{since: since, doubt: since.IsZero(), lastPos: -1, fresh: ttl - p.l.driftFor(p.c.driftFactor, ttl)}
}

// queuedDelay takes in the answer of the round sent at sent (a refusal g,
// or the store's failure err) and returns how long to sleep and whether a
// grant pushed during the sleep can be taken as it is.
func (p *lockWait) queuedDelay(w *waiter, sent time.Time, g store.Grant, err error) (time.Duration, bool) {
	q, req := p.q, p.req
	delay := req.QueueTTL / 3
	if err != nil {
		// The gap to the next refused round covers this one.
		return min(delay, w.bo.next()), false
	}
	if time.Since(q.since) >= q.fresh {
		q.doubt = true
	}
	q.since = sent
	w.bo.reset()
	if req.Mode == ModeMutex {
		p.l.contended.mark(req.Name)
	}
	if req.Mode == ModeFair && g.Position != q.lastPos {
		q.lastPos = g.Position
		if p.c.onPosition != nil {
			p.c.onPosition(g.Position)
		}
	}
	// A mutex waiter is not in line: any may take the lock when the
	// holder's lease runs out.
	if (g.Position == 0 || req.Mode == ModeMutex) && g.RetryAfter > 0 {
		delay = min(delay, g.RetryAfter+time.Millisecond)
	}
	// A fair lock handed over may be held for less than its TTL: the store
	// holds it until the waiter's queue deadline at most (the claim window,
	// so that a waiter that died before claiming it keeps the others
	// waiting no longer than its place would have), and the next Acquire
	// claims the whole TTL. With a queue TTL shorter than the hold, a
	// pushed grant is confirmed by that Acquire (one more round trip).
	windowed := req.Mode == ModeFair && req.QueueTTL < req.TTL
	return min(delay, q.fresh/2), !q.doubt && !windowed
}

// waiter is what a wait sleeps on: the wake sources (a grant the store
// pushes, a Watch of the name, or neither: polling), the timer and the
// backoff. The acquire loop (run) and an election's Observe sleep on one.
type waiter struct {
	store   store.Store
	log     *slog.Logger
	grants  <-chan store.Grant // pushed grants, when the store hands the lock over
	wake    <-chan struct{}    // the name may have become free
	stop    func()             // stops grants and wake; nil: nothing to stop
	watched string             // the name wake watches
	timer   *time.Timer        // made at the first sleep with a delay
	bo      backoff
}

func newWaiter(s store.Store, c *config) *waiter {
	return &waiter{store: s, log: c.logger, bo: backoff{min: c.minBackoff, max: c.maxBackoff}}
}

// close stops the wake sources and the timer.
func (w *waiter) close() {
	w.unwatch()
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (w *waiter) unwatch() {
	if w.stop != nil {
		w.stop()
	}
	w.grants, w.wake, w.stop, w.watched = nil, nil, nil, ""
}

// watching reports whether anything but the timer can wake the wait.
func (w *waiter) watching() bool { return w.grants != nil || w.wake != nil }

// handOver makes a grant watch for req the wake source, when the store can
// hand req's lock to it ([store.GrantWatcher]); it reports whether it did.
func (w *waiter) handOver(ctx context.Context, req Request) bool {
	gw, ok := w.store.(store.GrantWatcher)
	if !ok {
		return false
	}
	ch, stop, err := gw.WatchGrant(ctx, req)
	if err != nil {
		if !errors.Is(err, ErrNotSupported) {
			w.log.Debug("dlock: grant watch failed; falling back to watch", "name", req.Name, "err", err)
		}
		return false
	}
	w.unwatch()
	w.grants, w.stop = ch, stop
	return true
}

// watch makes a Watch of name the wake source, unless it already is, and
// reports whether it changed. When the Watch fails, the wait polls.
func (w *waiter) watch(ctx context.Context, name string, mode Mode) bool {
	if w.wake != nil && w.watched == name {
		return false
	}
	w.unwatch()
	w.watched = name
	ch, stop, err := w.store.Watch(ctx, name, mode)
	if err != nil {
		w.log.Debug("dlock: watch failed; falling back to polling", "name", name, "err", err)
		return true
	}
	w.wake, w.stop = ch, stop
	return true
}

// backoffDelay is the next backoff, cut to just past the holder's expiry
// when the refusal g tells it.
func (w *waiter) backoffDelay(g store.Grant) time.Duration {
	delay := w.bo.next()
	if g.RetryAfter > 0 {
		delay = min(delay, g.RetryAfter+time.Millisecond)
	}
	return delay
}

// woke says what ended a sleep.
type woke uint8

const (
	wokeTimer woke = iota // the delay passed
	wokeWatch             // the watched name may have become free
	wokeGrant             // the store pushed a grant
	wokeEnded             // ctx ended, or the caller's stop channel closed
)

// sleep blocks until a wake source fires, delay passes (a delay of 0 or
// less sleeps on the wake sources only), ctx ends or stop is closed. With
// wokeGrant it returns the pushed grant.
func (w *waiter) sleep(ctx context.Context, delay time.Duration, stop <-chan struct{}) (woke, store.Grant) {
	var tc <-chan time.Time
	if delay > 0 {
		if w.timer == nil {
			w.timer = time.NewTimer(delay)
		} else {
			w.timer.Reset(delay)
		}
		defer w.timer.Stop()
		tc = w.timer.C
	}
	select {
	case g := <-w.grants:
		return wokeGrant, g
	case <-w.wake:
		return wokeWatch, store.Grant{}
	case <-tc:
		return wokeTimer, store.Grant{}
	case <-ctx.Done():
		return wokeEnded, store.Grant{}
	case <-stop:
		return wokeEnded, store.Grant{}
	}
}
