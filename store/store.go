package store

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Store is the seam between the lockers and a backend. Every method is one
// atomic operation (one round trip on a networked store) and idempotent per
// Token: a retried Acquire with the same Token that already holds returns the
// same Fence. A name is one lock: whatever mode holds a name, a request in
// another mode is decided by [Coexist] atomically, refused with the held
// mode in [Grant.Held], and the name's one fence counter serves every mode.
// A semaphore request whose Limit differs from the limit the name's permits
// are held with fails with a [*LimitError]. Implementations must pass the
// storetest conformance suite, including its cross-pattern suite.
type Store interface {
	// Acquire tries once to grant req. A refusal is a Grant with Acquired
	// false, not an error; errors are for failures of the store itself.
	Acquire(ctx context.Context, req Request) (Grant, error)
	// Extend renews every request's lease to its TTL, pipelined where the
	// store can. It returns one error per request: nil when extended,
	// ErrNotHeld when the token no longer holds the lock.
	Extend(ctx context.Context, reqs []Request) []error
	// Release gives up req.Token's hold (or queue place). It returns
	// ErrNotHeld when the token holds nothing.
	Release(ctx context.Context, req Request) error
	// Watch returns a channel that receives a value when the lock name may
	// have become free (released, handed over and, where the store can tell,
	// expired), and a function that stops watching. Sends never block:
	// a slow receiver sees one pending wake-up.
	Watch(ctx context.Context, name string, mode Mode) (<-chan struct{}, func(), error)
}

// Request is one operation on one lock, as a [Store] sees it.
type Request struct {
	Name  string        // lock name, 1-256 bytes (see [ValidName])
	Token string        // the holder's secret: only it can extend or release
	TTL   time.Duration // lease length for Acquire and Extend
	Mode  Mode
	Owner string // ModeReentrant: who may re-enter (defaults to Token)
	Limit int    // ModeSemaphore: number of permits
	// Queue asks a store to keep the caller's place when Acquire is refused:
	// a fair-lock ticket, or a writer's intent that blocks new readers. The
	// place is itself a lease of QueueTTL; Release with the same Token drops it.
	Queue    bool
	QueueTTL time.Duration
	// Value is, in ModeElection, the candidate's value (at most
	// [MaxValueLen] bytes), kept with the hold and returned by
	// [Elector.Leader]. A retried Acquire by the holder keeps the first value.
	Value string

	// The fields below are recorded with a hold when Acquire grants it
	// (a new hold: a repeat by the holder, a re-entry or a resume keeps the
	// first record), atomically with the grant, and are gone with the hold.
	// Each store documents where it keeps them. Where the store can, it
	// writes nothing extra when all four are unset, so the fast path costs
	// what it did before them.

	// Holder names who holds, as [Inspector] shows it ([Holder.Owner]):
	// at most [MaxHolderLen] bytes of valid UTF-8 without NUL bytes, ""
	// for none. It is not
	// the reentrant Owner above: it decides nothing, it is only shown.
	Holder string
	// Data is the caller's data kept with the hold and shown with the
	// holder ([Holder.Data]): at most [MaxDataLen] bytes of valid UTF-8
	// without NUL bytes, "" for none.
	Data string
	// MinHold keeps an exclusive hold (ModeMutex, ModeFair, ModeElection,
	// and each name of a multi-lock) at least this long from its grant by
	// the store's clock: a Release before then answers nil and leaves the
	// hold to the store's own expiry at grant + MinHold (the fence is
	// unchanged; no process keeps a timer). Once so kept, no later request
	// of its token (an Extend or a repeated Acquire that was in flight, or
	// landed late) ends it before grant + MinHold. A crashed holder is still
	// bounded by its TTL. 0 for none. Shared modes ignore it.
	MinHold time.Duration
	// MaxHold bounds the hold from its grant by the store's clock: every
	// grant and Extend sets the hold's expiry to at most grant + MaxHold, so
	// an extend past it is capped and, once the hold ran out there, answered
	// ErrNotHeld, whichever process sends it. 0 for none. A reentrant
	// hold's bound is its first grant's.
	MaxHold time.Duration
}

// MaxHolderLen bounds [Request.Holder].
const MaxHolderLen = 256

// MaxDataLen bounds [Request.Data].
const MaxDataLen = 1024

// ValidHold checks the hold record fields of req (Holder, Data, MinHold,
// MaxHold) and returns nil or an [*InvalidError] naming the field: "holder",
// "data", "minHold" or "maxHold". Stores call it in Acquire before they
// touch the backend, so a bad record changes nothing.
func ValidHold(req Request) error {
	if len(req.Holder) > MaxHolderLen {
		return invalid("holder", fmt.Sprintf("must be at most %d bytes", MaxHolderLen))
	}
	if !utf8.ValidString(req.Holder) || strings.IndexByte(req.Holder, 0) >= 0 {
		return invalid("holder", "must be valid UTF-8 without NUL bytes")
	}
	if len(req.Data) > MaxDataLen {
		return invalid("data", fmt.Sprintf("must be at most %d bytes", MaxDataLen))
	}
	// Data is text: every store keeps it as a string (JSON on etcd and the
	// HTTP service, a text column on PostgreSQL).
	if !utf8.ValidString(req.Data) || strings.IndexByte(req.Data, 0) >= 0 {
		return invalid("data", "must be valid UTF-8 without NUL bytes")
	}
	if req.MinHold < 0 {
		return invalid("minHold", "must not be negative")
	}
	if req.MaxHold < 0 {
		return invalid("maxHold", "must not be negative")
	}
	if req.MaxHold > 0 && req.MinHold > req.MaxHold {
		return invalid("minHold", "must not exceed maxHold")
	}
	return nil
}

// Grant is a store's answer to Acquire.
type Grant struct {
	Acquired bool
	// Fence is the fencing token of the grant: strictly greater than the
	// fence of every earlier grant of an exclusive hold on the same name.
	Fence int64
	// RetryAfter is, when Acquired is false, how long the current hold has
	// left by the store's clock (0 when unknown).
	RetryAfter time.Duration
	// Held is, when Acquired is false, the mode of the name's current hold:
	// a name is one lock whatever pattern holds it (see [Coexist]). A key
	// set by a foreign library on a Valkey/Redis store is reported as
	// ModeMutex. When nobody holds the name and the refusal comes from the
	// request's own mode (a fair queue or a waiting writer ahead of the
	// caller), it is the request's mode.
	Held Mode
	// Count is the hold count of a reentrant grant.
	Count int
	// Position is the caller's place in a fair queue (0 is the head).
	Position int
	// TTL is, from [Resumer.Resume], the TTL the hold was extended to:
	// the request's TTL, capped by the hold's MaxHold.
	TTL time.Duration
	// MaxHoldLeft is, from [Resumer.Resume], what is left of the hold's
	// MaxHold by the store's clock (0 when it has none).
	MaxHoldLeft time.Duration
}

// MaxValueLen bounds a candidate's value in an election ([Request.Value]).
const MaxValueLen = 4096

// MaxMultiNames bounds the names of one multi-lock, and so the requests of
// one [MultiStore.AcquireMulti].
const MaxMultiNames = 64

// ValidName reports whether name is a valid lock name: 1-256 bytes of
// valid UTF-8 without control characters. It returns nil or an
// [*InvalidError] for the field "name". Stores check every name with it
// (or a stricter rule of their own) before they touch the backend.
func ValidName(name string) error {
	if name == "" || len(name) > 256 {
		return invalid("name", "must be 1-256 bytes")
	}
	if !utf8.ValidString(name) {
		return invalid("name", "must be valid UTF-8")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return invalid("name", "must not contain control characters")
		}
	}
	return nil
}
