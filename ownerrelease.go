package dlock

import (
	"context"
	"time"
)

// Forget ends the lease for its Locker as a Release that the store
// confirmed would, without asking the store: Done closes, Err returns nil,
// the lease's contexts are cancelled with [ErrReleased], and the observer
// gets its [EventRelease]; the store's hold is left as it is, to whoever
// holds the token. It is for a lease of [WithOwnerReleaseOnly] whose owner
// is known to have extended or released it elsewhere (the lock service's
// instances forget the /v1 leases a client served through another one).
// On any other lease it leaves the hold to run out at its TTL. It returns
// what Release would without a store call: an error wrapping
// [ErrLeaseLost] for a lost lease, [ErrNotHeld] for one already ended.
func (ls *Lease) Forget() error {
	start := time.Now()
	if err := ls.markReleased(); err != nil {
		return err
	}
	ls.reportRelease(context.Background(), start, nil)
	return nil
}
