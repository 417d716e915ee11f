package dlock

import "time"

// Drifter is implemented by stores whose holds need a larger clock-drift
// margin than the Locker's own (such as store/redlock's WithDriftFactor):
// the Locker subtracts the larger of the two from every lease's validity.
type Drifter interface {
	// Drift returns the margin for a hold of ttl.
	Drift(ttl time.Duration) time.Duration
}

// driftFor returns the validity margin of a lease of ttl: factor (the
// lock's [WithDriftFactor]) of ttl plus 2ms, or the store's margin when it
// is a [Drifter] asking for more.
func (l *Locker) driftFor(factor float64, ttl time.Duration) time.Duration {
	d := time.Duration(float64(ttl)*factor) + 2*time.Millisecond
	if dr, ok := l.store.(Drifter); ok {
		d = max(d, dr.Drift(ttl))
	}
	return d
}
