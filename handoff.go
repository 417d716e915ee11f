package dlock

import "context"

// GrantWatcher is implemented by stores that hand a released lock straight
// to a queued waiter inside the release (the fair lock, [ModeFair], and on
// some stores the mutex, [ModeMutex], to a registered waiter). The
// waiter learns of its grant from the wake-up itself, so the handoff costs
// one trip from the releaser to the store and one from the store to the
// waiter, with no acquire round trip in between, and one release wakes one
// waiter.
//
// WatchGrant returns a channel that receives the Grant when the lock named by
// req is handed to req.Token, and a function that stops watching. It must be
// called before the Acquire that queues req.Token, so no handoff is missed.
// Deliveries are best effort: a waiter still refreshes its queue entry by
// Acquire (which reports a hold it was handed) and so learns of a grant whose
// wake-up was lost. A store must deliver a Grant only for a hold it gave to
// req.Token, and at most once.
type GrantWatcher interface {
	WatchGrant(ctx context.Context, req Request) (<-chan Grant, func(), error)
}
