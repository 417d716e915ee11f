package dlock

import "context"

// Semaphore is a lock with n permits: at most n holders at a time, for
// limiting concurrent operations across processes.
//
// Every permit is its own [Lease] with its own token, TTL and fence, so a
// holder that crashes gives its permit back when its lease runs out, and
// never blocks the others for longer. The store never lets more than n
// holders in; all users of one name must agree on n (each acquire is judged
// against the n it brings). Waiters are not queued: a freed permit goes to
// whichever waiter asks first.
//
// Each permit's fence is new and strictly greater than every earlier one of
// the same name, but permits are shared: a fence orders grants, it does not
// make one holder exclusive.
type Semaphore struct {
	l    *Locker
	name string
	n    int
	cfg  config
}

// Semaphore returns the semaphore called name with n permits. Options
// override the Locker's defaults for this lock; a bad option, name or n
// (below 1) is reported by TryAcquire and Acquire.
func (l *Locker) Semaphore(name string, n int, opts ...Option) *Semaphore {
	return &Semaphore{l: l, name: name, n: n, cfg: l.lockConfig(opts)}
}

func (s *Semaphore) request() (Request, error) {
	if s.n < 1 {
		return Request{}, invalid("limit", "must be at least 1")
	}
	return Request{Name: s.name, Mode: ModeSemaphore, Limit: s.n}, nil
}

// TryAcquire makes one attempt to take a permit and does not wait. It
// returns the [Lease], or a [*LockedError] (wrapping [ErrLocked], with the
// time until the first permit's lease runs out) when all n are taken, a
// [*StoreError] when the store failed, an [*InvalidError] for a bad name, n
// or option, or [ErrClosed].
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	req, err := s.request()
	if err != nil {
		return nil, err
	}
	return s.l.acquire(ctx, &s.cfg, req, false)
}

// Acquire takes a permit, waiting until one is free or ctx ends. It is
// woken by the store when a permit is released and falls back to a timer at
// the first permit's expiry and capped backoff. When ctx ends it returns an
// error matching both ctx.Err() and the last outcome, and leaves nothing
// behind.
func (s *Semaphore) Acquire(ctx context.Context) (*Lease, error) {
	req, err := s.request()
	if err != nil {
		return nil, err
	}
	return s.l.acquire(ctx, &s.cfg, req, true)
}
