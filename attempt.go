package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// call is one acquire call of a Locker: the request its attempts send, and
// what it keeps of them.
type call struct {
	l   *Locker
	c   *config
	req Request
	log attemptLog
	// late is set when an attempt got a grant it could not use (it came
	// after ctx ended, after the lease would have run out, or after Close):
	// the token holds the lock until the call releases it.
	late bool
	// floor, when set, is a time before which the store cannot have
	// granted the call's hold, earlier than the request that gets its
	// grant: the send of a request whose grant came too late to be used
	// (asked again, the store repeats that grant), or a queued wait's last
	// refused round, after which the store may hand the lock over before
	// the claim. The lease's max hold counts from it (see lowerFloor).
	floor time.Time
}

// attemptLog is what one acquire call keeps of its requests.
type attemptLog struct {
	n int // requests sent, for the call's Event
	// unknownSince is the send of the call's first request whose outcome
	// stayed unknown (zero: none). Such a request may still reach the
	// store at any time, after a later grant and a longer Extend too, and
	// (Acquire being idempotent per token) set the hold back to its TTL from
	// then: the lease made by the call is capped as by an unanswered
	// extension (see newLease).
	unknownSince time.Time
}

// final reports whether err is the store's definite answer that refuses a
// request for good: bad input, a mode it cannot provide, an upgrade that
// would deadlock. Such a request took nothing; asking again cannot help.
func final(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotSupported) || errors.Is(err, ErrUpgrade)
}

// try makes one attempt of the call. A reply lost to a network error is
// resolved by asking again with the same token (see ask), unless ctx has
// ended; nothing is sent once it has. When the outcome stays unknown, or
// the grant came too late to be used, the token may hold the lock without
// anyone knowing: try leaves that to the wait (see run), which asks again
// with the same token or releases once when it gives up (mayHold). A
// release sent while the wait goes on could reach the store after the
// wait's next grant and free it.
//
// The attempt is not abandoned when ctx ends: it gets its reply, or is cut
// short opTimeout later (see attemptContext). A call abandoned to ctx can
// still reach the store after the Release that cleans up behind the caller
// (a client that spreads calls over several connections, as valkey-go does,
// sends the two on different ones) and re-create what the Release removed:
// a queue place or write intent that keeps others out until its queue TTL,
// or a grant that nobody knows of. So a caller whose ctx ends gets its
// answer at most twice the op timeout later: one for the call in flight,
// one for the release.
func (cl *call) try(ctx context.Context) (*Lease, store.Grant, error) {
	if cl.l.isClosed.Load() {
		return nil, store.Grant{}, ErrClosed
	}
	var g store.Grant
	sent, err := cl.ask(ctx, func(actx context.Context) (err error) {
		g, err = cl.l.store.Acquire(actx, cl.req)
		return err
	}, nil)
	if err != nil {
		return nil, store.Grant{}, err
	}
	if !g.Acquired {
		return nil, g, nil
	}
	ls, err := cl.l.newLease(ctx, cl.c, cl.req, g, sent, cl.log.unknownSince, cl.floor)
	if err != nil {
		cl.late = true
		cl.lowerFloor(sent)
		return nil, store.Grant{}, err
	}
	return ls, g, nil
}

// lowerFloor moves the call's floor back to t, when t is earlier.
func (cl *call) lowerFloor(t time.Time) {
	if cl.floor.IsZero() || t.Before(cl.floor) {
		cl.floor = t
	}
}

// ask sends one request of the call with send, unless ctx has ended, and
// when its reply is lost sends it once more, with the same token, unless
// ctx has ended by then: the store answers a repeated request as it
// answered the first (Acquire and AcquireMulti are idempotent per token).
// It returns when the request that got the answer was sent. A request
// whose outcome stays unknown may still reach the store, however late:
// ask records it in the call's log (see newLease) and, unless release is
// nil, gives up whatever the token may hold with release at once (for a
// caller that asks with a fresh token next time); with release nil that
// is left to the caller.
func (cl *call) ask(ctx context.Context, send func(context.Context) error, release func(context.Context)) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err // nothing sent
	}
	cl.log.n++
	sent := time.Now()
	actx, acancel := cl.l.expiries.attemptContext(ctx, cl.c.opTimeout)
	err := send(actx)
	acancel()
	if err == nil || final(err) {
		return sent, err
	}
	if cl.log.unknownSince.IsZero() {
		cl.log.unknownSince = sent
	}
	if ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cl.c.opTimeout)
		sent = time.Now()
		err = send(rctx)
		cancel()
		if err == nil {
			return sent, nil
		}
	}
	if release != nil {
		cl.afterwards(ctx, release)
	}
	return sent, errors.Join(&StoreError{Op: "acquire", Node: -1, Err: err}, ctx.Err())
}

// mayHold reports whether the call's token may hold something on the store
// that its caller does not know of: a request whose outcome stayed unknown
// (it may still arrive, after a refusal too), or a grant it could not use.
func (cl *call) mayHold() bool { return cl.late || !cl.log.unknownSince.IsZero() }

// afterwards runs fn, a store call made for a caller that gave up or got a
// grant it cannot use, with the op timeout whatever ctx's state.
func (cl *call) afterwards(ctx context.Context, fn func(context.Context)) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cl.c.opTimeout)
	defer cancel()
	fn(rctx)
}
