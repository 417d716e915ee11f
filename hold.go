package dlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// This file holds what a hold records and keeps on the store besides its
// token (who holds it, the caller's data, its min and max hold), and the
// calls that work on a hold by name or token: Resume and ForceRelease.

// Holder describes one hold of a lock: the owner and data recorded by its
// grant ([WithHolder], [WithHolderData]), the grant's time by the store's
// clock and its fence. It never reveals the token. It is [store.Holder].
type Holder = store.Holder

// MaxHolderLen bounds [WithHolder]; MaxHolderData bounds [WithHolderData].
const (
	MaxHolderLen  = store.MaxHolderLen
	MaxHolderData = store.MaxDataLen
)

// WithHolder names who holds the locks taken with it, as the store records
// it with each hold it grants and shows it ([Holder.Owner], the service's
// GET /v1/locks, `dlock status`): at most [MaxHolderLen] bytes of valid
// UTF-8, typically [DefaultHolder]. It decides nothing (it is not the
// reentrant owner of [WithOwner]) and is recorded once per hold: a repeat
// by the holder, a re-entry or a [Locker.Resume] keeps the first record.
// Default "" (none): the store then writes nothing for it, and shows the
// hold's owner as unknown. A bad value is an [*InvalidError] for "holder".
func WithHolder(owner string) Option {
	return func(c *config) {
		var ie *InvalidError
		if errors.As(store.ValidHold(Request{Holder: owner}), &ie) {
			c.fail(ie.Field, ie.Reason)
			return
		}
		c.holder = owner
	}
}

// WithHolderData keeps data with each hold, shown beside its holder
// ([Holder.Data]) to whoever may read the lock's state: at most
// [MaxHolderData] bytes of valid UTF-8 without NUL bytes, recorded as [WithHolder] is. Default "" (none).
// A larger value is an [*InvalidError] for "data", and nothing is sent.
func WithHolderData(data string) Option {
	return func(c *config) {
		var ie *InvalidError
		if errors.As(store.ValidHold(Request{Data: data}), &ie) {
			c.fail(ie.Field, ie.Reason)
			return
		}
		c.holderData = data
	}
}

// DefaultHolder returns "<hostname>/<pid>" of this process, a value for
// [WithHolder] (the hostname "unknown" when the system cannot tell it).
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	pid := "/" + strconv.Itoa(os.Getpid())
	host = strings.ToValidUTF8(host, "?")
	if len(host)+len(pid) > MaxHolderLen {
		host = strings.ToValidUTF8(host[:MaxHolderLen-len(pid)], "")
	}
	return host + pid
}

// WithMinHold keeps an exclusive hold at least d from its grant: "at most
// once per interval" for a job that many replicas start on a schedule. A
// Release before grant + d answers nil, but the store keeps the name held
// until grant + d, by the store's clock (its own expiry does it: no process
// keeps a timer); the fence stays the one granted. So a job that finishes
// in a second does not run again on another replica the next second.
//
// It works on [Mutex], [Fair], [Election] and each name of a [Multi]
// (including the names a Multi that takes them one by one releases when
// another name refuses it: they too stay held until their min hold ends).
// Acquiring with it on [Reentrant], [RWMutex] or [Semaphore] returns an
// [*InvalidError] for "minHold", whether it was set on the lock or on the
// Locker: a min hold those patterns cannot keep is not silently dropped.
//
// What it does not promise: it holds the name after a release, not beyond
// one. A holder that crashes or stops renewing is still bounded by its TTL
// (the name frees when its lease runs out, min hold or not), and
// [WithMaxHold] still bounds the hold from above (d must not exceed it). It
// does not make the job run at least once per interval either: that takes
// a replica asking each interval. See docs/patterns.md. Default 0 (none);
// from 0 to 365 days.
func WithMinHold(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > MaxHold {
			c.fail("minHold", "must be between 0 and 8760h")
			return
		}
		c.minHold = d
	}
}

// minHoldMode reports whether a hold of mode keeps a min hold.
func minHoldMode(m Mode) bool {
	return m == ModeMutex || m == ModeFair || m == ModeElection
}

// holdFields sets the fields of req that the store records with a new
// hold, from c: the holder and data, the min hold, and the max hold. The
// store's max hold is the lease's plus its lock-delay and the drift margin
// of the max hold, so that the store never ends a hold that its lease
// still counts valid (the lease counts from the send, the store from its
// grant, by its own clock). A reentrant hold's bound on the store would be
// its first grant's, whichever re-entry asks, so on a reentrant lock the
// max hold is kept by each lease alone.
func (l *Locker) holdFields(c *config, req *Request) error {
	if c.minHold > 0 && !minHoldMode(req.Mode) {
		return invalid("minHold", fmt.Sprintf("applies to exclusive locks only (Mutex, Fair, Election, Multi), not to a %v lock", req.Mode))
	}
	req.Holder, req.Data, req.MinHold, req.MaxHold = c.holder, c.holderData, c.minHold, 0
	if c.maxHold > 0 && req.Mode != ModeReentrant {
		req.MaxHold = c.maxHold + c.lockDelay + l.driftFor(c.driftFactor, c.maxHold)
	}
	return nil
}

// Resume takes back a lease that a process was granted earlier, by the
// lock's name, the lease's token and its mode (req.Name, req.Token,
// req.Mode; other fields are ignored but req.TTL, which sets the lease's
// TTL as [WithTTL] does): after a restart, say, with the token it
// persisted. It confirms on the store, atomically, that the token still
// holds the name in that mode (a repeat by the holder: nothing new is
// granted, the hold's record and its min and max hold are kept) and
// extends the hold to the lease's TTL, capped by the hold's max hold.
//
// The Lease it returns is an ordinary one: its Fence is the hold's, its
// validity is counted from when the request was sent, less the drift
// margin, to the TTL the store extended the hold to, and the hold's max
// hold ends it as [WithMaxHold] does (at what the store had left of it,
// or, for a hold without one, at the max hold set by opts from now).
// With [WithAutoRenew] it is renewed; otherwise extend it in time. It
// follows every rule of a lease: one extension in flight, validity from
// the request sent, and a request whose outcome stayed unknown capping
// what later extensions count. Requests that the lease's earlier life left
// in flight (a process that died mid-call) may still land and set the
// hold back to their TTL: the resumed lease counts no extension beyond the
// TTL it was resumed with, so resume with a TTL no longer than the
// earlier process asked for (its TTL and its extensions').
//
// It returns [ErrNotHeld] when the token no longer holds the name in that
// mode (nothing changed on the store), an error wrapping [ErrNotSupported]
// when the store cannot resume ([store.Resumer]), an [*InvalidError] for a
// bad name, token, mode or option, a [*StoreError] when the store did not
// answer (the hold was left alone or extended; Resume may be called again
// with the same token), an error wrapping [ErrMaxHold] when the hold's
// max hold leaves nothing to resume, or [ErrClosed]. The hold is the
// caller's: Resume never releases it, whatever it returns. With a ctx
// without a deadline the call is bounded by [WithOpTimeout]. Observers
// get an [EventAcquire] for it, as for any acquire (Result "locked" for
// ErrNotHeld), so the resumed lease's events are matched like others'.
func (l *Locker) Resume(ctx context.Context, req Request, opts ...Option) (*Lease, error) {
	opts = opts[:len(opts):len(opts)]
	if req.TTL != 0 {
		opts = append(opts, WithTTL(req.TTL))
	}
	c := l.lockConfig(opts)
	if err := resumeCheck(&c, req); err != nil {
		return nil, err
	}
	rs, ok := l.store.(store.Resumer)
	if !ok {
		return nil, notSupported("resuming a lease")
	}
	if c.lockDelay > 0 && !store.SupportsLockDelay(l.store) {
		return nil, notSupported("lock-delay (the store does not end holds by its own clock)")
	}
	req = Request{Name: req.Name, Token: req.Token, Mode: req.Mode, Owner: req.Owner, Limit: req.Limit, Value: req.Value,
		TTL: c.leaseTTL() + c.lockDelay}
	if l.cfg.observer == nil {
		return l.resume(ctx, &c, rs, req)
	}
	start := time.Now()
	ls, err := l.resume(ctx, &c, rs, req)
	ev := Event{Kind: EventAcquire, Mode: req.Mode, Name: req.Name, Duration: time.Since(start), Context: ctx, Start: start,
		Attempts: 1, Err: err, Result: "error"}
	switch {
	case ls != nil:
		ev.Result, ev.Fence, ev.Lease, ev.Owner = "acquired", ls.fence, ls.id, ls.req.Holder
	case errors.Is(err, ctx.Err()) && ctx.Err() != nil:
		ev.Result = "canceled"
	case errors.Is(err, ErrInvalid):
		ev.Result = "invalid"
	case errors.Is(err, ErrNotHeld):
		ev.Result = "locked"
	}
	l.emit(ev)
	return ls, err
}

func resumeCheck(c *config, req Request) error {
	if c.err != nil {
		return c.err
	}
	if err := ValidName(req.Name); err != nil {
		return err
	}
	switch {
	case req.Token == "" || len(req.Token) > 256:
		return invalid("token", "must be 1-256 bytes")
	case strings.HasPrefix(req.Token, markerPrefix):
		return invalid("token", `must not start with "dlock:", the prefix of the stores' markers`)
	case req.Mode.String() == "unknown":
		return invalid("mode", "must be one of the lock modes")
	}
	return nil
}

// resume asks rs to resume req and turns its answer into a Lease. A
// request whose reply was lost is asked once more (Resume is idempotent
// per token); one whose outcome stayed unknown caps the lease as an
// unanswered extension does.
func (l *Locker) resume(ctx context.Context, c *config, rs store.Resumer, req Request) (*Lease, error) {
	cl := &call{l: l, c: c, req: req}
	if l.isClosed.Load() {
		return nil, ErrClosed
	}
	var g store.Grant
	var refused error
	sent, err := cl.ask(ctx, func(actx context.Context) error {
		var err error
		g, err = rs.Resume(actx, req)
		refused = nil
		if errors.Is(err, ErrNotHeld) || err == nil && !g.Acquired {
			refused, err = ErrNotHeld, nil // a definite answer
		}
		return err
	}, nil)
	switch {
	case err != nil:
		return nil, err
	case refused != nil:
		return nil, refused
	}
	// The lease's TTL is what the store extended the hold to; its max hold
	// what the store has left of the hold's, counted from the send.
	if g.TTL > 0 && g.TTL < req.TTL {
		req.TTL = g.TTL
	}
	rc := *c
	if g.MaxHoldLeft > 0 {
		left := g.MaxHoldLeft - c.lockDelay - l.driftFor(c.driftFactor, g.MaxHoldLeft)
		if rc.maxHold == 0 || left < rc.maxHold {
			rc.maxHold = left
		}
	}
	if rc.maxHold < 0 || req.TTL <= c.lockDelay || rc.maxHold > 0 && rc.maxHold <= l.driftFor(c.driftFactor, rc.maxHold) {
		return nil, &maxHoldError{c.maxHold}
	}
	// Requests of the lease's earlier life may still be in flight and
	// set the hold back to their TTL when they land: as for a request of
	// unknown outcome, no extension counts beyond the resumed TTL.
	unknown := cl.log.unknownSince
	if unknown.IsZero() {
		unknown = sent
	}
	return l.newLease(ctx, &rc, req, g, sent, unknown, time.Time{})
}

// ForceRelease ends every hold of name, whatever its mode and token (a
// foreign library's key on Valkey/Redis too), even one kept by a min hold:
// the operator's way out of a name held by a process that is stuck. Queue
// places are kept, and the fence counter too, so the next grant's fence is
// above every ended hold's: pass fences to the protected resource, and the
// forced holders' late writes are refused. It returns the holds it ended,
// none when nobody held the name.
//
// A forced holder is not told: its lease stays valid for it until its next
// extension or renewal is refused (at most its TTL), while the name may
// already be granted again. That is what the fence is for. This Locker's
// own leases on name are ended at once (Done closes, Err wraps
// [ErrLeaseLost]).
//
// It returns an error wrapping [ErrNotSupported] when the store cannot
// force a release ([store.ForceReleaser]), an [*InvalidError] for a bad
// name, a [*StoreError] when the store did not answer (the holds may or
// may not have ended), or [ErrClosed]. With a ctx without a deadline the
// call is bounded by [WithOpTimeout].
func (l *Locker) ForceRelease(ctx context.Context, name string) ([]Holder, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	fr, ok := l.store.(store.ForceReleaser)
	if !ok {
		return nil, notSupported("force-release")
	}
	if l.isClosed.Load() {
		return nil, ErrClosed
	}
	cctx, cancel := l.callContext(ctx)
	defer cancel()
	held, err := fr.ForceRelease(cctx, name)
	switch {
	case err == nil:
	case errors.Is(err, ErrNotSupported), errors.Is(err, ErrInvalid), errors.Is(err, ErrClosed):
		return nil, err
	case ctx.Err() != nil:
		return nil, errors.Join(&StoreError{Op: "forceRelease", Node: -1, Err: err}, ctx.Err())
	default:
		return nil, &StoreError{Op: "forceRelease", Node: -1, Err: err}
	}
	l.loseName(name, fmt.Errorf("%w: force-released", ErrLeaseLost))
	return held, nil
}

// loseName ends every held lease of the Locker on name as lost with err.
func (l *Locker) loseName(name string, err error) {
	l.mu.Lock()
	var lost []*Lease
	for _, ls := range l.sched.h {
		if ls.req.Name == name && ls.state == leaseHeld {
			lost = append(lost, ls)
		}
	}
	for _, ls := range lost {
		l.loseLocked(ls, err)
	}
	l.mu.Unlock()
	for _, ls := range lost {
		l.afterLoss(ls)
	}
}
