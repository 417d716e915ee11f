package dlock

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// drifter is a store.Store (whose methods are not called) with a drift margin.
type drifter struct {
	store.Store
	factor float64
}

func (d drifter) Drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl) * d.factor)
}

// TestLockerDriftFor: a lease's margin is the larger of the lock's drift
// and its store's, when the store is a store.Drifter.
func TestLockerDriftFor(t *testing.T) {
	const ttl = 10 * time.Second
	tests := []struct {
		name   string
		store  store.Store
		factor float64 // the lock's WithDriftFactor
		want   time.Duration
	}{
		{"store without drift", struct{ store.Store }{}, 0.01, 102 * time.Millisecond},
		{"store drifts more", drifter{factor: 0.2}, 0.01, 2 * time.Second},
		{"lock drifts more", drifter{factor: 0.2}, 0.3, 3002 * time.Millisecond},
		{"store drifts as much", drifter{factor: 0.0102}, 0.01, 102 * time.Millisecond},
	}
	for _, tt := range tests {
		l := &Locker{store: tt.store, cfg: defaultConfig()}
		if got := l.driftFor(tt.factor, ttl); got != tt.want {
			t.Errorf("%s: driftFor(%v) = %v, want %v", tt.name, ttl, got, tt.want)
		}
	}
}
