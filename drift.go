package dlock

import (
	"time"

	"github.com/dlock-dev/dlock/store"
)

// driftFor returns the clock-drift margin that a lease of ttl, of a lock
// whose [WithDriftFactor] is factor, subtracts from its validity: factor of
// ttl plus 2ms, or the store's margin when it is a [store.Drifter] asking for
// more. Every validity the Locker computes from a grant or an extension
// uses it.
func (l *Locker) driftFor(factor float64, ttl time.Duration) time.Duration {
	d := time.Duration(float64(ttl)*factor) + 2*time.Millisecond
	if dr, ok := l.store.(store.Drifter); ok {
		d = max(d, dr.Drift(ttl))
	}
	return d
}
