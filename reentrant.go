package dlock

import "context"

// Reentrant is an exclusive lock that its owner may take again while it
// holds it: the reentrant (recursive) lock.
//
// Every acquisition, first or nested, is its own [Lease] with its own token,
// so it is released exactly once; the store counts the owner's live
// acquisitions and frees the lock when the last one is released. A count
// can therefore never go negative, and releasing a lease twice returns
// [ErrNotHeld]. The whole hold has one expiry on the store: each
// acquisition and renewal pushes it out (never in), and when it runs out,
// every lease of the hold is gone at once. Re-entries return the fence of
// the first grant; [Lease.Count] is the hold count after the grant.
//
// The owner is, in order: the ID set by [WithOwner] (for processes or HTTP
// clients that share an identity), else the owner of the reentrant lease on
// the same name carried by ctx (see [ContextWithLease]; [Reentrant.Do] puts
// it there), else a new owner, so that calls with unrelated contexts
// exclude each other as with a plain mutex.
type Reentrant struct {
	l    *Locker
	name string
	cfg  config
}

// Reentrant returns the reentrant lock called name. Options override the
// Locker's defaults for this lock; a bad option or name is reported by
// TryLock and Lock.
func (l *Locker) Reentrant(name string, opts ...Option) *Reentrant {
	return &Reentrant{l: l, name: name, cfg: l.lockConfig(opts)}
}

func (r *Reentrant) request(ctx context.Context) Request {
	owner := r.cfg.owner
	if owner == "" {
		if ls := leaseInContext(ctx, r.name, ModeReentrant); ls != nil {
			owner = ls.req.Owner
		}
	}
	if owner == "" {
		owner = newToken()
	}
	return Request{Name: r.name, Mode: ModeReentrant, Owner: owner}
}

// TryLock makes one attempt to take or re-enter the lock and does not wait.
// It returns the [Lease], or a [*LockedError] (wrapping [ErrLocked]) when
// another owner holds it, a [*StoreError] when the store failed, an
// [*InvalidError] for a bad name or option, or [ErrClosed].
func (r *Reentrant) TryLock(ctx context.Context) (*Lease, error) {
	return r.l.acquire(ctx, &r.cfg, r.request(ctx), false)
}

// Lock takes or re-enters the lock, waiting until it is free or ctx ends,
// as [Mutex.Lock] does. A re-entry never waits.
func (r *Reentrant) Lock(ctx context.Context) (*Lease, error) {
	return r.l.acquire(ctx, &r.cfg, r.request(ctx), true)
}

// Do takes or re-enters the lock (waiting as Lock does), runs fn with a ctx
// that carries the lease and is cancelled the moment the lease is lost, and
// releases this acquisition when fn returns. Calls to Do or Lock on the
// same name with that ctx, however deeply nested, re-enter. The lease is
// auto-renewed while fn runs. Do returns fn's error, joined with an error
// wrapping [ErrLeaseLost] if the lease was lost meanwhile, or the acquire
// error if fn never ran.
func (r *Reentrant) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	c := r.cfg
	c.autoRenew = true
	lease, err := r.l.acquire(ctx, &c, r.request(ctx), true)
	if err != nil {
		return err
	}
	return runHolding(ctx, lease, fn)
}

// leaseInContext returns the innermost live lease on name in mode carried by
// ctx, or nil.
func leaseInContext(ctx context.Context, name string, mode Mode) *Lease {
	n, _ := ctx.Value(leaseKey{}).(*leaseNode)
	for ; n != nil; n = n.parent {
		ls := n.lease
		if ls.Name() != name || ls.Mode() != mode {
			continue
		}
		if !ls.over() {
			return ls
		}
	}
	return nil
}
