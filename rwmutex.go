package dlock

import (
	"context"
	"errors"
	"fmt"
)

// RWMutex is a read-write lock: many readers or one writer.
//
// Every reader holds its own [Lease] with its own token and TTL, so a reader
// that crashes blocks writers only until its own lease runs out. A writer
// waiting in [RWMutex.Lock] leaves an intent on the store (a queue entry,
// itself a lease of [WithQueueTTL] that the waiter refreshes) that keeps new
// readers out until the writer has had its turn, so a stream of readers
// cannot starve writers. Writers are served in the order their intents
// arrived. Each acquire is one atomic store operation.
//
// A writer's grant carries a new fence; a reader's carries the current one
// (the fence of the last write grant), so a resource can tell whether a
// write happened since a read.
//
// A holder of the write lock may downgrade it to a read lock
// ([RWMutex.Downgrade]), and a reader taking the read lock again with a ctx
// that carries the write lease is let in beside it. The opposite, taking the
// write lock while holding the read lock, would deadlock: Lock and TryLock
// return [ErrUpgrade] when ctx carries a read lease of the same lock, and
// stores refuse it too when told the reader's token. The lock is not
// reentrant otherwise.
type RWMutex struct {
	l    *Locker
	name string
	cfg  config
}

// RWMutex returns the read-write lock called name. Options override the
// Locker's defaults for this lock; a bad option or name is reported by the
// lock methods.
func (l *Locker) RWMutex(name string, opts ...Option) *RWMutex {
	return &RWMutex{l: l, name: name, cfg: l.lockConfig(opts)}
}

func (rw *RWMutex) readRequest(ctx context.Context) Request {
	req := Request{Name: rw.name, Mode: ModeRead}
	if w := leaseInContext(ctx, rw.name, ModeWrite); w != nil {
		req.Owner = w.Token()
	}
	return req
}

func (rw *RWMutex) writeRequest(ctx context.Context, queue bool) (Request, error) {
	if r := leaseInContext(ctx, rw.name, ModeRead); r != nil {
		return Request{}, ErrUpgrade
	}
	return Request{Name: rw.name, Mode: ModeWrite, Queue: queue}, nil
}

// TryRLock makes one attempt to take the read lock and does not wait. It
// fails while a writer holds the lock or waits for it. It returns the
// [Lease], or a [*LockedError] (wrapping [ErrLocked]), a [*StoreError], an
// [*InvalidError] or [ErrClosed].
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return rw.l.acquire(ctx, &rw.cfg, rw.readRequest(ctx), false)
}

// RLock takes the read lock, waiting while a writer holds the lock or waits
// for it, until ctx ends. It is woken by the store when a writer releases.
// When ctx ends it returns an error matching both ctx.Err() and the last
// outcome, and leaves nothing behind.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return rw.l.acquire(ctx, &rw.cfg, rw.readRequest(ctx), true)
}

// TryLock makes one attempt to take the write lock and does not wait or
// leave an intent. It fails while anyone holds the lock or another writer
// waits. It returns the [Lease], or a [*LockedError] (wrapping [ErrLocked]),
// [ErrUpgrade] when ctx carries a read lease of this lock, a [*StoreError],
// an [*InvalidError] or [ErrClosed].
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	req, err := rw.writeRequest(ctx, false)
	if err != nil {
		return nil, err
	}
	return rw.l.acquire(ctx, &rw.cfg, req, false)
}

// Lock takes the write lock, waiting until every reader and earlier writer
// is gone or ctx ends. While it waits, new readers are kept out. When ctx
// ends it withdraws its intent and returns an error matching both ctx.Err()
// and the last outcome. It returns [ErrUpgrade] at once when ctx carries a
// read lease of this lock.
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	req, err := rw.writeRequest(ctx, true)
	if err != nil {
		return nil, err
	}
	return rw.l.acquire(ctx, &rw.cfg, req, true)
}

// Downgrade turns the write lease w of this lock into a read lease without
// letting another writer in between: it takes the read lock beside w (which
// the store allows only to the holder of w), then releases w. Waiting
// readers may then enter; waiting writers still wait for the returned lease.
//
// It returns the read [Lease]; an [*InvalidError] when w is not a write
// lease of this lock; an error wrapping [ErrLeaseLost] (or [ErrNotHeld])
// when w had already ended or the store no longer held it, in which case
// the read lease is released, since a writer may have come in between; or
// the acquire error of the read lock. w is released in every case but the
// last.
func (rw *RWMutex) Downgrade(ctx context.Context, w *Lease) (*Lease, error) {
	if w == nil || w.Mode() != ModeWrite || w.Name() != rw.name || w.l != rw.l {
		return nil, invalid("lease", "must be a write lease of this lock from this Locker")
	}
	select {
	case <-w.Done():
		if err := w.Err(); err != nil {
			return nil, err
		}
		return nil, ErrNotHeld
	default:
	}
	r, err := rw.l.acquire(ctx, &rw.cfg, Request{Name: rw.name, Mode: ModeRead, Owner: w.Token()}, false)
	if err != nil {
		return nil, err
	}
	err = w.Release(context.WithoutCancel(ctx))
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrNotHeld):
		_ = r.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: write lease ended before the downgrade: %w", ErrLeaseLost, err)
	default:
		// The store did not confirm the release; the write hold frees
		// itself at its TTL. The read lease is good meanwhile.
		rw.cfg.logger.Warn("dlock: release after downgrade failed", "name", rw.name, "err", err)
		return r, nil
	}
}
