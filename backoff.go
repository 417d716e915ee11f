package dlock

import (
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with full jitter: the n-th delay is
// uniform in [0, min(max, min*2^n)).
type backoff struct {
	min, max time.Duration
	n        uint
}

func (b *backoff) next() time.Duration {
	ceil := b.max
	if b.n < 32 {
		if c := b.min << b.n; c > 0 && c < b.max {
			ceil = c
		}
	}
	b.n++
	return time.Duration(rand.Int64N(int64(ceil))) + time.Microsecond //nolint:gosec // G404: backoff jitter, not a secret (tokens come from crypto/rand)
}

func (b *backoff) reset() { b.n = 0 }
