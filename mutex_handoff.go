package dlock

import (
	"context"
	"errors"
)

// waitHandoff waits for a mutex as a registered waiter, on a store that
// hands a released mutex straight to one of them ([GrantWatcher] for
// [ModeMutex]): the release that finds a live registration sets the lock
// key to that waiter's token and tells it, so the waiter wakes holding the
// lock and one release wakes one waiter. The registration is a queue entry
// of QueueTTL, refreshed every third of it, and dropped when ctx ends. The
// mutex stays unfair: a lock that falls free by expiry goes to whoever asks
// first, registered or not, so every waiter also retries at the holder's
// expiry.
//
// ok is false when the store cannot hand the mutex over; the caller then
// waits as before, by Watch. Only a Locker's own tokens wait this way: a
// waiter whose store calls fail waits on under a fresh token (see
// waitGrant), which a caller-chosen token must not be.
func (l *Locker) waitHandoff(ctx context.Context, c *config, req Request) (ls *Lease, err error, ok bool) {
	gw, ok := l.store.(GrantWatcher)
	if !ok {
		return nil, nil, false
	}
	req.Queue = true
	req.QueueTTL = c.queueTTLOrDefault()
	grants, stop, err := gw.WatchGrant(ctx, req)
	if err != nil {
		if !errors.Is(err, ErrNotSupported) {
			c.logger.Debug("dlock: grant watch failed; falling back to watch", "name", req.Name, "err", err)
		}
		return nil, nil, false
	}
	ls, err = l.waitGrant(ctx, c, req, grants, stop)
	return ls, err, true
}
