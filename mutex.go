package dlock

import "context"

// Mutex is an exclusive lock on one name: the simple fail-fast mutex
// (TryLock), the retry lock (Lock) and, with [WithAutoRenew], the watchdog.
// On Valkey its key is the plain `lock:<name>` string holding the token, so
// it interoperates with other clients of the `SET key token NX PX` protocol.
type Mutex struct {
	l    *Locker
	name string
	cfg  config
}

// Mutex returns the exclusive lock called name. Options override the
// Locker's defaults for this lock; a bad option or name is reported by
// TryLock and Lock.
func (l *Locker) Mutex(name string, opts ...Option) *Mutex {
	return &Mutex{l: l, name: name, cfg: l.lockConfig(opts)}
}

// TryLock makes one attempt to take the lock and does not wait. It returns
// the [Lease], or a [*LockedError] (wrapping [ErrLocked], with the holder's
// remaining time) when someone else holds it, a [*StoreError] (wrapping
// [ErrUnavailable]) when the store failed, an [*InvalidError] for a bad name
// or option, or [ErrClosed].
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.l.acquire(ctx, &m.cfg, Request{Name: m.name, Mode: ModeMutex}, false)
}

// Lock takes the lock, waiting until it is free or ctx ends. It is woken by
// the store when the lock is released or expires, and falls back to capped
// exponential backoff with full jitter (see [WithBackoff]). On a store that
// hands a released mutex to a waiter ([store.GrantWatcher] for [ModeMutex],
// such as Valkey) a refused caller registers as a waiter (a queue entry of
// [WithQueueTTL]), and a release hands the lock to one live registered
// waiter, which wakes already holding it. The mutex is not fair: which
// waiter gets it is not arrival order, and a lock freed by expiry goes to
// whoever asks first; use [Fair] for arrival order. A registered waiter
// is not woken by a release that does not hand over (another library's
// compare-and-delete, a DEL by hand): it finds the lock free at its next
// queue refresh (every QueueTTL/3) or at the holder's expiry, whichever
// comes first. Store failures
// while waiting are retried. When ctx ends it returns an error matching
// both ctx.Err() and the last outcome ([ErrLocked] or [ErrUnavailable]),
// and leaves nothing behind on the store (no key, no registration): a call
// in flight when ctx ends is given up to [WithOpTimeout] to answer, and the
// release behind it up to another, so Lock returns at most twice the op
// timeout after ctx ends (at once when the store answers).
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	return m.l.acquire(ctx, &m.cfg, Request{Name: m.name, Mode: ModeMutex}, true)
}

// Do takes the mutex called name (waiting as [Mutex.Lock] does), runs fn
// with the lease's [Lease.Context] of ctx (it carries the lease, see
// [LeaseFromContext], and is cancelled the moment the lease is lost, with
// the loss error as its [context.Cause]), and releases the lock when fn
// returns. The lease is auto-renewed while fn runs; with [WithMaxHold] the
// renewal stops at the max hold and fn's ctx is cancelled then, with a cause
// wrapping [ErrMaxHold]. Do returns fn's error, joined with an error
// wrapping [ErrLeaseLost] if the lease was lost meanwhile, or the acquire
// error if fn never ran.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	lease, err := l.Mutex(name, append(opts, WithAutoRenew())...).Lock(ctx)
	if err != nil {
		return err
	}
	return runHolding(ctx, lease, fn)
}

// runHolding runs fn under lease and releases it afterwards.
func runHolding(ctx context.Context, lease *Lease, fn func(ctx context.Context) error) error {
	ferr := fn(lease.Context(ctx))
	if lost := lease.Err(); lost != nil {
		return joinOnce(ferr, lost)
	}
	rctx := context.WithoutCancel(ctx)
	if err := lease.Release(rctx); err != nil {
		return joinOnce(ferr, err)
	}
	return ferr
}

// joinOnce joins err to ferr unless ferr already wraps it (fn often returns
// the context's cause).
func joinOnce(ferr, err error) error {
	if ferr == nil {
		return err
	}
	if ferr == err {
		return ferr
	}
	return joinErrs(ferr, err)
}
