package dlock

import "context"

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
