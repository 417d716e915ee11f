package dlock

import (
	"context"
	"strings"
)

// markerPrefix starts every marker the Valkey/Redis stores keep in a name's
// main key while a pattern other than the mutex holds it ("dlock:read",
// "dlock:semaphore:3", ...). A mutex's key holds its token, so a token of
// that shape would be taken for another pattern's hold, and its release
// could delete one.
const markerPrefix = "dlock:"

// Acquire is the low-level form of every pattern's TryLock and Lock, for
// code that forwards requests it did not build itself (the HTTP service, a
// remote store). It takes the lock req describes (its Name, Mode, Owner,
// Limit and Queue) with a lease of req.TTL (0: the Locker's TTL) and a
// queue entry of req.QueueTTL (0: see [WithQueueTTL]); with
// wait it waits as [Mutex.Lock] does, otherwise it fails fast as
// [Mutex.TryLock] does. Options override the Locker's settings as in the
// pattern constructors.
//
// req.Token, when set, is the lease's token instead of a fresh random one:
// a retried Acquire with the same token is then idempotent (the store
// returns the same grant and refreshes its TTL). The caller must make the
// token as unguessable as the random ones (at least 128 random bits), since
// whoever knows it can extend or release the lease. Use a token for one
// lease at a time: a [Lease] obtained with it ends (released or lost) for
// the store too, whatever other Lease shares the token. A token is at most
// 256 bytes and must not start with "dlock:", the prefix of the markers the
// Valkey/Redis stores keep in a name's key while other patterns hold it.
//
// It returns what [Mutex.TryLock] and [Mutex.Lock] return, an
// [*InvalidError] naming the field ("token", "value") of a request it
// refuses, and an error wrapping [ErrNotSupported] for a mode the store
// cannot provide.
func (l *Locker) Acquire(ctx context.Context, req Request, wait bool, opts ...Option) (*Lease, error) {
	opts = opts[:len(opts):len(opts)]
	if req.TTL != 0 {
		opts = append(opts, WithTTL(req.TTL))
	}
	if req.QueueTTL != 0 {
		opts = append(opts, WithQueueTTL(req.QueueTTL))
	}
	c := l.lockConfig(opts)
	if len(req.Token) > 256 {
		return nil, invalid("token", "must be at most 256 bytes")
	}
	if strings.HasPrefix(req.Token, markerPrefix) {
		return nil, invalid("token", `must not start with "dlock:", the prefix of the stores' markers`)
	}
	if len(req.Value) > MaxValueLen {
		return nil, invalid("value", "must be at most 4096 bytes")
	}
	return l.acquire(ctx, &c, req, wait)
}
