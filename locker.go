package dlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Locker hands out leases on the locks of one [Store]. It owns one renewal
// scheduler goroutine for all its leases. A Locker is safe for concurrent
// use; Close stops it.
type Locker struct {
	store Store
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
}

// New returns a Locker over store. Options set the defaults of every lock it
// hands out; see each option for its default. It returns an
// [*InvalidError] for a nil store or a bad option.
func New(store Store, opts ...Option) (*Locker, error) {
	if store == nil {
		return nil, invalid("store", "must not be nil")
	}
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	l := &Locker{store: store, cfg: cfg, stop: make(chan struct{})}
	l.sched = scheduler{l: l, timer: time.NewTimer(time.Hour), wakeAt: time.Now().Add(time.Hour)}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.sched.run(l.stop)
	}()
	return l, nil
}

// Store returns the store the Locker was created with.
func (l *Locker) Store() Store { return l.store }

// Close releases every lease the Locker still holds (their Done closes and
// Err reports [ErrLeaseLost] wrapping [ErrClosed]; a lease whose validity
// had passed is lost as it would have been anyway, and with a lock-delay
// its hold is left to run out), stops the renewal
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
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.opTimeout)
		if err := l.store.Release(ctx, ls.req); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, err)
		}
		cancel()
	}
	close(l.stop)
	l.wg.Wait()
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

// afterLoss runs the loss hooks and frees the store's copy of the lock in the
// background (the store may still hold it if a renewal's reply was lost).
func (l *Locker) afterLoss(ls *Lease) {
	l.runLossHooks(ls)
	l.emit(Event{Kind: EventLeaseLost, Mode: ls.req.Mode, Name: ls.req.Name, Fence: ls.fence, Duration: time.Since(ls.acquiredAt)})
	l.cfg.logger.Warn("dlock: lease lost", "name", ls.req.Name, "fence", ls.fence, "err", ls.err)
	l.mu.Lock()
	closed := l.closed
	if !closed && ls.delay == 0 {
		l.wg.Add(1)
	}
	l.mu.Unlock()
	if closed || ls.delay > 0 {
		// With a lock-delay the store's hold runs out by itself, the delay
		// after its last extension.
		return
	}
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.opTimeout)
		defer cancel()
		l.store.Release(ctx, ls.req)
	}()
}

func (l *Locker) runLossHooks(ls *Lease) {
	l.mu.Lock()
	hooks := ls.onLoss
	ls.onLoss = nil
	err := ls.err
	l.mu.Unlock()
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
	c.apply(opts)
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
	if c.lockDelay > 0 && !SupportsLockDelay(l.store) {
		return nil, notSupported("lock-delay (the store does not end holds by its own clock)")
	}
	req.TTL = c.ttl + c.lockDelay // the store's hold; the lease is valid for c.ttl
	ownToken := req.Token == ""
	if ownToken {
		req.Token = newToken()
	}
	if req.Queue {
		req.QueueTTL = c.queueTTLOrDefault()
	}
	observed := l.cfg.observer != nil
	var start time.Time
	if observed {
		start = time.Now()
	}
	result := func(ls *Lease, err error) (*Lease, error) {
		if !observed {
			return ls, err
		}
		ev := Event{Kind: EventAcquire, Mode: req.Mode, Name: req.Name, Duration: time.Since(start), Waited: wait}
		switch {
		case ls != nil:
			ev.Result, ev.Fence = "acquired", ls.fence
		case errors.Is(err, ctx.Err()) && ctx.Err() != nil:
			ev.Result = "canceled"
		case errors.Is(err, ErrLocked):
			ev.Result = "locked"
		default:
			ev.Result = "error"
		}
		l.emit(ev)
		return ls, err
	}
	if !wait {
		ls, g, err := l.tryOnce(ctx, c, req)
		if ls == nil && err == nil {
			err = &LockedError{Name: req.Name, RetryAfter: g.RetryAfter, Held: g.Held}
		}
		return result(ls, err)
	}

	if req.Mode == ModeFair {
		return result(l.waitFair(ctx, c, req, ownToken))
	}
	if req.Mode == ModeMutex && ownToken && l.contended.has(req.Name) {
		// Lately contended: register at the first attempt.
		if ls, err, ok := l.waitHandoff(ctx, c, req); ok {
			return result(ls, err)
		}
	}
	// A free lock is taken without watching it: watching costs the store
	// work (a tracked key, a push per change), which only a waiter needs.
	// A refused caller watches, then tries again at once (the loop below),
	// so a release between the refusal and the watch is not missed.
	if ls, _, err := l.tryOnce(ctx, c, req); ls != nil {
		return result(ls, nil)
	} else if err != nil && !errors.Is(err, ErrUnavailable) {
		return result(nil, err)
	}
	if req.Mode == ModeMutex && ownToken {
		if ls, err, ok := l.waitHandoff(ctx, c, req); ok {
			return result(ls, err)
		}
	}
	wake, stopWatch, err := l.store.Watch(ctx, req.Name, req.Mode)
	if err != nil {
		c.logger.Debug("dlock: watch failed; falling back to polling", "name", req.Name, "err", err)
		wake, stopWatch = nil, func() {}
	}
	defer stopWatch()
	bo := backoff{min: c.minBackoff, max: c.maxBackoff}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ls, g, err := l.tryOnce(ctx, c, req)
		if ls != nil {
			return result(ls, nil)
		}
		if err != nil && !errors.Is(err, ErrUnavailable) {
			return result(nil, err)
		}
		if err != nil {
			c.logger.Debug("dlock: acquire failed; retrying", "name", req.Name, "err", err)
		}
		delay := bo.next()
		if g.RetryAfter > 0 && g.RetryAfter+time.Millisecond < delay {
			delay = g.RetryAfter + time.Millisecond
		}
		if req.Queue {
			delay = min(delay, req.QueueTTL/3)
		}
		timer.Reset(delay)
		select {
		case <-wake:
			bo.reset()
		case <-timer.C:
		case <-ctx.Done():
			if req.Queue {
				l.dropQueued(ctx, req)
			}
			if err == nil {
				err = &LockedError{Name: req.Name, RetryAfter: g.RetryAfter, Held: g.Held}
			}
			return result(nil, errors.Join(err, ctx.Err()))
		}
	}
}

// dropQueued removes a waiter's queue entry after it gave up. If the store
// granted the lock meanwhile, the release frees it too.
func (l *Locker) dropQueued(ctx context.Context, req Request) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.opTimeout)
	defer cancel()
	l.store.Release(rctx, req)
}

// tryOnce makes one acquire attempt. A reply lost to a network error is
// resolved by asking again with the same token (Acquire is idempotent per
// token); if that fails too, the token's hold is released so that no lock
// is left behind that nobody knows of.
//
// The attempt is not abandoned when ctx ends: it gets its reply, or is cut
// short opTimeout later (see attemptContext). A call abandoned to ctx can
// still reach the store after the Release that cleans up behind the caller
// (a client that spreads calls over several connections, as valkey-go does,
// sends the two on different ones) and re-create what the Release removed:
// a queue place or write intent that keeps others out until its queue TTL,
// or a grant that nobody knows of.
func (l *Locker) tryOnce(ctx context.Context, c *config, req Request) (*Lease, Grant, error) {
	if l.isClosed.Load() {
		return nil, Grant{}, ErrClosed
	}
	sent := time.Now()
	actx, acancel := l.expiries.attemptContext(ctx, c.opTimeout)
	g, err := l.store.Acquire(actx, req)
	acancel()
	if err != nil {
		if errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotSupported) || errors.Is(err, ErrUpgrade) {
			return nil, Grant{}, err
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout)
		sent = time.Now()
		g, err = l.store.Acquire(rctx, req)
		if err != nil {
			l.store.Release(rctx, req)
			cancel()
			return nil, Grant{}, errors.Join(&StoreError{Op: "acquire", Node: -1, Err: err}, ctx.Err())
		}
		cancel()
	}
	if !g.Acquired {
		return nil, g, nil
	}
	ls, err := l.newLease(ctx, c, req, g, sent)
	if err != nil {
		return nil, Grant{}, err
	}
	return ls, g, nil
}

// newLease turns grant g of req, asked for at sent, into a held Lease and
// hands it to the scheduler. A grant that came too late or after ctx ended
// is released instead.
func (l *Locker) newLease(ctx context.Context, c *config, req Request, g Grant, sent time.Time) (*Lease, error) {
	ttl := req.TTL - c.lockDelay
	validUntil := sent.Add(ttl - l.driftFor(c.driftFactor, ttl))
	if ctx.Err() != nil || !time.Now().Before(validUntil) {
		// The caller gave up, or the grant came too late to be of use.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout)
		l.store.Release(rctx, req)
		cancel()
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
		autoRenew:   c.autoRenew,
		renewEvery:  c.renewInterval(),
		driftFactor: c.driftFactor,
		acquiredAt:  sent,
		validUntil:  validUntil,
		renewAt:     sent.Add(c.renewInterval()),
		index:       -1,
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout)
		l.store.Release(rctx, req)
		cancel()
		return nil, ErrClosed
	}
	l.sched.reschedule(ls)
	l.mu.Unlock()
	return ls, nil
}
