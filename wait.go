package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// waiter is the one waiting engine: what a wait sleeps on, and how it gives
// up. It owns the wake sources (a grant the store pushes, a Watch of the
// name, or neither: polling), the timer and the backoff. Every wait — the
// acquire of the mutex, reentrant, read-write, semaphore and election
// (Locker.acquire), of the fair lock and a handed-over mutex (waitGrant),
// of a Multi (Multi.Lock) and an election's Observe — is a loop of short
// attempts that each end in sleep; when ctx ends, the wait returns ended's
// error and leaves nothing behind (releaseBehind).
type waiter struct {
	store   store.Store
	log     *slog.Logger
	grants  <-chan store.Grant // pushed grants, when the store hands the lock over
	wake    <-chan struct{}    // the name may have become free
	stop    func()             // stops grants and wake
	watched string             // the name wake watches
	timer   *time.Timer
	bo      backoff
}

func newWaiter(s store.Store, c *config) *waiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{store: s, log: c.logger, stop: func() {}, timer: t, bo: backoff{min: c.minBackoff, max: c.maxBackoff}}
}

// close stops the wake sources and the timer.
func (w *waiter) close() {
	w.stop()
	w.timer.Stop()
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
	w.stop()
	w.grants, w.wake, w.stop, w.watched = ch, nil, stop, ""
	return true
}

// watch makes a Watch of name the wake source, unless it already is, and
// reports whether it changed. When the Watch fails, the wait polls.
func (w *waiter) watch(ctx context.Context, name string, mode Mode) bool {
	if w.wake != nil && w.watched == name {
		return false
	}
	w.stop()
	w.grants, w.wake, w.stop, w.watched = nil, nil, func() {}, name
	ch, stop, err := w.store.Watch(ctx, name, mode)
	if err != nil {
		w.log.Debug("dlock: watch failed; falling back to polling", "name", name, "err", err)
		return true
	}
	w.wake, w.stop = ch, stop
	return true
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
		w.timer.Reset(delay)
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

// ended is what a wait for name returns when ctx ended: its last outcome (a
// refusal, or the store's failure; a refusal when nil) joined with
// ctx.Err(), so that it matches both.
func ended(ctx context.Context, last error, name string) error {
	switch {
	case last == nil:
		last = &LockedError{Name: name}
	case errors.Is(last, ctx.Err()):
		return last
	}
	return errors.Join(last, ctx.Err())
}

// endedAfter is what a wait returns when an attempt's error err came with
// ctx ended (an attempt never sent, or cut short): the previous round's
// outcome last joined with ctx.Err(), so that a refusal's RetryAfter and
// Held survive; err itself when there was no previous round or err is not
// the context's.
func endedAfter(ctx context.Context, err, last error, name string) error {
	if last != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return ended(ctx, last, name)
	}
	return err
}

// releaseBehind gives up whatever req's token holds on the store (a hold, a
// queue place, a write intent) for a caller that gave up or got a grant it
// cannot use: with c's op timeout, whatever ctx's state.
func (l *Locker) releaseBehind(ctx context.Context, c *config, req Request) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout)
	defer cancel()
	_ = l.store.Release(rctx, req)
}
