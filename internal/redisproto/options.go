package redisproto

import (
	"log/slog"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// Options are what the options of both Redis stores set: the key prefix,
// the fence retention, strict eviction and the logger. Start from
// DefaultOptions; the setters record the first invalid value in Err.
type Options struct {
	Prefix         string
	FenceRetention time.Duration
	StrictEviction bool
	Logger         *slog.Logger
	Err            error // the first invalid option, a *store.InvalidError
}

// The defaults of Options.
const (
	DefaultPrefix = "lock:"
	// ClockStepBound is the largest total step back of a server's clock,
	// within any 2 × DefaultFenceRetention, that the default fence
	// retention covers while clients of the version before 2026-11 lock the
	// same names (docs/safety.md, "Fences on Valkey/Redis", Claim 3). A
	// total, not a bound on each step: steps back add up, so four steps of
	// 10 s within two minutes exceed it. This version alone, on a node that
	// keeps its data, needs no bound on the clock (Claim 1).
	ClockStepBound = 30 * time.Second
	// FenceLeadBound bounds how far a fence may be ahead of its server's
	// clock floor when issued: under a millisecond on one node; up to the
	// 100 ms of a floor proposed by store/redlock plus the clock offset
	// between Redlock nodes (assumed under 900 ms) for a written-back fence.
	FenceLeadBound = time.Second
	// DefaultFenceRetention is how long a name's fence key stays past the
	// TTL of its last hold: 2 × ClockStepBound + FenceLeadBound, 61 s. Once
	// the key is gone, a version without fence marks starts the name at the
	// clock floor, which must be above the name's last fence by then. That
	// fence leads the clock floor by at most FenceLeadBound plus the steps
	// back of the clock before the key's last write (carried by the key or
	// the slot's mark), and the clock may step back again before the next
	// grant: all those steps within one ClockStepBound in total (Claim 3),
	// the other ClockStepBound is left to outrun the grants meanwhile
	// (fewer than 250 per ms on a hash slot; a node serves about 60).
	DefaultFenceRetention = 2*ClockStepBound + FenceLeadBound
)

// DefaultOptions returns the defaults: prefix "lock:", a fence retention of
// DefaultFenceRetention, eviction warned about, and a logger that discards.
func DefaultOptions() Options {
	return Options{Prefix: DefaultPrefix, FenceRetention: DefaultFenceRetention, Logger: slog.New(slog.DiscardHandler)}
}

// Invalid records that option field is invalid, unless one was before.
func (o *Options) Invalid(field, reason string) {
	if o.Err == nil {
		o.Err = &store.InvalidError{Field: field, Reason: reason}
	}
}

// SetFenceRetention sets FenceRetention to d, at least a second.
func (o *Options) SetFenceRetention(d time.Duration) {
	if d < time.Second {
		o.Invalid("fence retention", "must be at least 1s")
		return
	}
	o.FenceRetention = d
}

// SetLogger sets Logger to l, not nil.
func (o *Options) SetLogger(l *slog.Logger) {
	if l == nil {
		o.Invalid("logger", "must not be nil")
		return
	}
	o.Logger = l
}
