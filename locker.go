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

	contended hotNames // mutexes waited for lately (acquire.go)
	expiries  expiries // deadlines of store calls (deadline.go)

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
