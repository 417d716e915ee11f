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
	// ClockStepBound is the largest step back of a server's clock that the
	// default fence retention covers (see docs/safety.md, "Fences on
	// Valkey/Redis").
	ClockStepBound = 30 * time.Second
	// FenceLeadBound bounds how far a fence may be ahead of its server's
	// clock floor when issued: under a millisecond on one node; up to the
	// 100 ms of a floor proposed by store/redlock plus the clock offset
	// between Redlock nodes (assumed under 900 ms) for a written-back fence.
	FenceLeadBound = time.Second
	// DefaultFenceRetention is how long a name's fence key stays past the
	// TTL of its last hold: 2 × ClockStepBound + FenceLeadBound, 61 s. One
	// ClockStepBound absorbs a step back, the other lets the clock floor
	// outrun the grants of a version without fence marks on the name
	// meanwhile (at any rate below 490 per ms; a node serves about 60).
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
