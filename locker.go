package dlock

import (
	"context"
	"errors"
	"github.com/dlock-dev/dlock/store"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Locker hands out leases on the locks of one [Store]. It owns one renewal
// scheduler goroutine for all its leases. A Locker is safe for concurrent
// use; Close stops it.
type Locker struct {
	store store.Store
	cfg   config

	mu     sync.Mutex
	sched  scheduler // its heap holds every lease not yet ended
	closed bool
	// isClosed is closed, readable without mu: an attempt on a closed
	// Locker fails before it reaches the store.
	isClosed atomic.Bool

	contended hotNames // mutexes waited for lately (mutex_handoff.go)
	expiries  expiries // deadlines of store calls (attempt.go)

	stop chan struct{}
	wg   sync.WaitGroup // the scheduler, renewal batches, background releases

	// signals runs what follows the losses the scheduler finds (loss
	// hooks, the release behind), and reports the observer's events and
	// the log lines of what the Locker does by itself, each on a goroutine
	// of its own, so that neither holds up renewals (notify.go).
	signals, reports lane
}

// New returns a Locker over store. Options set the defaults of every lock it
// hands out; see each option for its default. It returns an
// [*InvalidError] for a nil store or a bad option.
func New(s store.Store, opts ...Option) (*Locker, error) {
	if s == nil {
		return nil, invalid("store", "must not be nil")
	}
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	l := &Locker{store: s, cfg: cfg, stop: make(chan struct{})}
	l.sched = scheduler{l: l, timer: time.NewTimer(time.Hour), wakeAt: time.Now().Add(time.Hour)}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.sched.run(l.stop)
	}()
	return l, nil
}

// Store returns the store the Locker was created with.
func (l *Locker) Store() store.Store { return l.store }

// Close releases every lease the Locker still holds (their Done closes and
// Err reports [ErrLeaseLost] wrapping [ErrClosed]; a lease whose validity
// had passed is lost as it would have been anyway, and with a lock-delay
// its hold is left to run out, as is the hold of a lease of
// [WithOwnerReleaseOnly], for its owner), stops the renewal
// scheduler and waits for it. It does not close the store. Later calls
// return [ErrClosed].
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.isClosed.Store(true)
	leases := slices.Clone(l.sched.h)
	var expired, release []*Lease
	for _, ls := range leases {
		if ls.expireLocked() {
			// Lost already: the store's hold is left to run out when a
			// lock-delay must follow it.
			expired = append(expired, ls)
			if ls.delay > 0 {
				continue
			}
		} else {
			l.loseLocked(ls, errors.Join(ErrLeaseLost, ErrClosed))
		}
		release = append(release, ls)
	}
	l.mu.Unlock()
	for _, ls := range expired {
		l.afterLoss(ls)
	}
	var errs []error
	for _, ls := range release {
		if !slices.Contains(expired, ls) {
			l.runLossHooks(ls)
			l.emitLoss(ls)
		}
		if ls.ownerOnly {
			continue // its owner releases it (WithOwnerReleaseOnly)
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.opTimeout)
		if err := l.store.Release(ctx, ls.req); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, err)
		}
		cancel()
	}
	close(l.stop)
	l.wg.Wait()
	l.signals.close() // may still queue reports
	l.reports.close()
	return errors.Join(errs...)
}

// loseLocked ends ls as lost. Caller holds l.mu and must call afterLoss
// after unlocking.
func (l *Locker) loseLocked(ls *Lease, err error) {
	if ls.state != leaseHeld {
		return
	}
	ls.state = leaseLost
	ls.err = err
	l.sched.remove(ls)
	ls.end()
}

// afterLoss runs the loss hooks, queues the loss's event and log line, and
// frees the store's copy of the lock in the background (the store may
// still hold it if a renewal's reply was lost).
func (l *Locker) afterLoss(ls *Lease) {
	l.runLossHooks(ls)
	l.emitLoss(ls)
	l.logLoss(ls)
	l.mu.Lock()
	closed := l.closed
	leave := closed || ls.delay > 0 || ls.ownerOnly
	if !leave {
		l.wg.Add(1)
	}
	l.mu.Unlock()
	if leave {
		// With a lock-delay the store's hold runs out by itself, the delay
		// after its last extension; with WithOwnerReleaseOnly its owner
		// releases it.
		return
	}
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.opTimeout)
		defer cancel()
		_ = l.store.Release(ctx, ls.req)
	}()
}

// afterLossBehind runs afterLoss for a lease that an accessor (TTL, Err,
// Done, Release, …) found past its validity, in the background: the loss
// hooks and the observer must not run inside a caller that may hold its
// own locks. expireLocked counted it in l.wg.
func (l *Locker) afterLossBehind(ls *Lease) {
	go func() {
		defer l.wg.Done()
		l.afterLoss(ls)
	}()
}

func (l *Locker) runLossHooks(ls *Lease) {
	l.mu.Lock()
	hooks := ls.onLoss
	ls.onLoss = nil
	ctxs := ls.endContextsLocked()
	err := ls.err
	l.mu.Unlock()
	cancelContexts(ctxs, err)
	for _, fn := range hooks {
		fn(err)
	}
}

func (l *Locker) emit(ev Event) {
	if l.cfg.observer != nil {
		l.cfg.observer(ev)
	}
}

// lockConfig returns the Locker's defaults overridden by opts.
func (l *Locker) lockConfig(opts []Option) config {
	c := l.cfg
	c.err = nil
	_ = c.apply(opts)
	return c
}

// acquire takes the lock of req, waiting until ctx ends when wait is set.
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
	req.TTL = c.leaseTTL() + c.lockDelay // the store's hold; the lease is valid for leaseTTL
	own := req.Token == ""
	if own {
		req.Token = newToken()
	}
	if req.Queue {
		req.QueueTTL = c.queueTTLOrDefault()
	}
	cc := *c // this call's own, to keep its attempts
	cc.attempts = new(attemptLog)
	if l.cfg.observer == nil {
		return l.take(ctx, &cc, req, wait, own)
	}
	start := time.Now()
	ls, err := l.take(ctx, &cc, req, wait, own)
	ev := Event{Kind: EventAcquire, Mode: req.Mode, Name: req.Name, Duration: time.Since(start), Waited: wait,
		Context: ctx, Start: start, Attempts: cc.attempts.n, Err: err}
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

// take is acquire once req is complete; own is set when req.Token is a
// fresh token of the Locker's own.
func (l *Locker) take(ctx context.Context, c *config, req Request, wait, own bool) (*Lease, error) {
	if !wait {
		ls, g, err := l.tryOnce(ctx, c, req, false)
		if ls == nil && err == nil {
			err = &LockedError{Name: req.Name, RetryAfter: g.RetryAfter, Held: g.Held}
		}
		return ls, err
	}
	if req.Mode == ModeFair {
		return l.waitFair(ctx, c, req, own)
	}
	if req.Mode == ModeMutex && own && l.contended.has(req.Name) {
		// Lately contended: register at the first attempt.
		if ls, err, ok := l.waitHandoff(ctx, c, req); ok {
			return ls, err
		}
	}
	// A free lock is taken without watching it: watching costs the store
	// work (a tracked key, a push per change), which only a waiter needs.
	// A refused caller watches, then tries again at once (the loop of
	// waitWatched), so a release between the refusal and the watch is not
	// missed.
	ls, g, err := l.tryOnce(ctx, c, req, true)
	switch {
	case ls != nil:
		return ls, nil
	case ctx.Err() != nil:
		if err != nil || req.Queue {
			l.releaseBehind(ctx, c, req) // what the attempt may hold, or its place
		}
		if err == nil {
			err = &LockedError{Name: req.Name, RetryAfter: g.RetryAfter, Held: g.Held}
		}
		return nil, ended(ctx, err, req.Name)
	case err != nil && !errors.Is(err, ErrUnavailable):
		if errors.Is(err, ErrClosed) {
			l.releaseBehind(ctx, c, req)
		}
		return nil, err
	}
	if req.Mode == ModeMutex && own {
		if ls, err, ok := l.waitHandoff(ctx, c, req); ok {
			return ls, err
		}
	}
	return l.waitWatched(ctx, c, req)
}

// waitWatched waits for req's lock, woken when the name may have become
// free (see [Store.Watch]), retrying with capped backoff and at the
// holder's expiry; a queued request (a writer's intent) refreshes its
// place every third of its queue TTL.
func (l *Locker) waitWatched(ctx context.Context, c *config, req Request) (*Lease, error) {
	w := newWaiter(l.store, c)
	defer w.close()
	w.watch(ctx, req.Name, req.Mode)
	var last error // the previous round's refusal or failure
	for {
		ls, g, err := l.tryOnce(ctx, c, req, true)
		if ls != nil {
			return ls, nil
		}
		if err != nil && (!errors.Is(err, ErrUnavailable) || ctx.Err() != nil) {
			l.releaseBehind(ctx, c, req) // what the attempt may hold, or its place
			return nil, endedAfter(ctx, err, last, req.Name)
		}
		last = err
		if err != nil {
			c.logger.Debug("dlock: acquire failed; retrying", "name", req.Name, "err", err)
		} else {
			last = &LockedError{Name: req.Name, RetryAfter: g.RetryAfter, Held: g.Held}
		}
		delay := w.bo.next()
		if g.RetryAfter > 0 {
			delay = min(delay, g.RetryAfter+time.Millisecond)
		}
		if req.Queue {
			delay = min(delay, req.QueueTTL/3)
		}
		switch woke, _ := w.sleep(ctx, delay, nil); woke {
		case wokeWatch:
			w.bo.reset()
		case wokeEnded:
			if req.Queue || err != nil {
				// A queue place, or what the failed round may have taken.
				l.releaseBehind(ctx, c, req)
			}
			return nil, ended(ctx, last, req.Name)
		}
	}
}

// tryOnce makes one acquire attempt. A reply lost to a network error is
// resolved by asking again with the same token (Acquire is idempotent per
// token), unless ctx has ended. When it stays unresolved, or the grant
// came too late to be used, the token may hold the lock without anyone
// knowing: with keep unset (a single attempt) tryOnce releases it behind
// the caller; with keep set (a wait) it leaves that to the wait, which asks
// again with the same token or releases once when it ends: a release sent
// while the wait goes on could reach the store after the wait's next grant
// and free it. Nothing is sent once ctx has ended, so a caller whose ctx
// ends gets its answer at most twice the op timeout later: one for the call
// in flight, one for the release.
//
// The attempt is not abandoned when ctx ends: it gets its reply, or is cut
// short opTimeout later (see attemptContext). A call abandoned to ctx can
// still reach the store after the Release that cleans up behind the caller
// (a client that spreads calls over several connections, as valkey-go does,
// sends the two on different ones) and re-create what the Release removed:
// a queue place or write intent that keeps others out until its queue TTL,
// or a grant that nobody knows of.
func (l *Locker) tryOnce(ctx context.Context, c *config, req Request, keep bool) (*Lease, store.Grant, error) {
	if l.isClosed.Load() {
		return nil, store.Grant{}, ErrClosed
	}
	if ctx.Err() != nil {
		return nil, store.Grant{}, ended(ctx, nil, req.Name) // nothing sent
	}
	g, sent, err := l.ask(ctx, c, req)
	if err == nil && g.Acquired {
		var ls *Lease
		if ls, err = l.newLease(ctx, c, req, g, sent); err == nil {
			return ls, g, nil
		}
	}
	if err == nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotSupported) || errors.Is(err, ErrUpgrade) {
		return nil, g, err
	}
	if !keep {
		l.releaseBehind(ctx, c, req)
	}
	return nil, store.Grant{}, err
}

// ask sends req's Acquire, and asks once more with the same token when the
// reply was lost and ctx has not ended. It returns the grant and when the
// request that got it was sent, and records in c.attempts every request
// whose outcome stayed unknown: it may still reach the store, however
// late (see newLease).
func (l *Locker) ask(ctx context.Context, c *config, req Request) (store.Grant, time.Time, error) {
	c.attempts.sent()
	sent := time.Now()
	actx, acancel := l.expiries.attemptContext(ctx, c.opTimeout)
	g, err := l.store.Acquire(actx, req)
	acancel()
	if err == nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotSupported) || errors.Is(err, ErrUpgrade) {
		return g, sent, err
	}
	c.attempts.unknown(sent)
	if ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout)
		sent = time.Now()
		g, err = l.store.Acquire(rctx, req)
		cancel()
		if err == nil {
			return g, sent, nil
		}
	}
	return store.Grant{}, sent, errors.Join(&StoreError{Op: "acquire", Node: -1, Err: err}, ctx.Err())
}

// newLease turns grant g of req, asked for at sent, into a held Lease and
// hands it to the scheduler. When a request of the call got no answer
// (c.attempts), the lease is capped as by an unanswered extension, and its
// max hold counts from that request's send. A grant that came too late, after ctx ended or
// after Close is refused with an error, and the caller must release it (or
// ask again with the same token).
func (l *Locker) newLease(ctx context.Context, c *config, req Request, g store.Grant, sent time.Time) (*Lease, error) {
	ttl := req.TTL - c.lockDelay
	validUntil := sent.Add(ttl - l.driftFor(c.driftFactor, ttl))
	first := sent // the first send that may have made the hold
	if ctx.Err() != nil || !time.Now().Before(validUntil) {
		// The caller gave up, or the grant came too late to be of use: the
		// caller releases it, or asks again.
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &StoreError{Op: "acquire", Node: -1, Err: errors.New("grant arrived after the lease ran out")}
	}
	ls := &Lease{
		l:           l,
		req:         req,
		fence:       g.Fence,
		count:       g.Count,
		delay:       c.lockDelay,
		ownerOnly:   c.ownerOnly,
		autoRenew:   c.autoRenew,
		renewEvery:  c.renewInterval(),
		driftFactor: c.driftFactor,
		acquiredAt:  sent,
		maxHold:     c.maxHold,
		id:          leaseIDs.Add(1),
		validUntil:  validUntil,
		renewAt:     sent.Add(c.renewInterval()),
		index:       -1,
	}
	if a := c.attempts; a != nil && !a.unknownSince.IsZero() {
		// A request of the call whose outcome is unknown may still reach
		// the store and set the hold back to ttl from then: no extension
		// counts beyond ttl, and the max hold counts from its send.
		ls.capTTL = ttl
		first = a.unknownSince
	}
	if c.maxHold > 0 {
		ls.holdEnd = first.Add(c.maxHold)
		ls.validUntil = earliest(validUntil, ls.holdEnd)
		ls.atMaxHold = !sent.Add(ttl).Before(ls.holdEnd)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	l.sched.reschedule(ls)
	l.mu.Unlock()
	return ls, nil
}
