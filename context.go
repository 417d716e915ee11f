package dlock

import (
	"context"
	"errors"
)

type leaseKey struct{}

type leaseNode struct {
	lease  *Lease
	parent *leaseNode
}

// ContextWithLease returns a copy of ctx that carries lease, so that code
// called with it can find the lease (a reentrant lock re-enters it).
// [Locker.Do] does this for fn.
func ContextWithLease(ctx context.Context, lease *Lease) context.Context {
	parent, _ := ctx.Value(leaseKey{}).(*leaseNode)
	return context.WithValue(ctx, leaseKey{}, &leaseNode{lease: lease, parent: parent})
}

// LeaseFromContext returns the innermost lease on name carried by ctx that
// has not ended, or nil.
func LeaseFromContext(ctx context.Context, name string) *Lease {
	n, _ := ctx.Value(leaseKey{}).(*leaseNode)
	for ; n != nil; n = n.parent {
		if n.lease.Name() == name && !n.lease.over() {
			return n.lease
		}
	}
	return nil
}

func joinErrs(errs ...error) error { return errors.Join(errs...) }

// leaseCtx is a context made by [Lease.Context], as its lease keeps it.
type leaseCtx struct {
	cancel context.CancelCauseFunc
	stop   func() bool // stops the AfterFunc that forgets it
}

// Context returns a context derived from parent that carries the lease (see
// [LeaseFromContext]) and is cancelled when the lease ends: when it is lost,
// [context.Cause] returns the loss error (wrapping [ErrLeaseLost]; also
// [ErrMaxHold] at its [WithMaxHold], [ErrClosed] when its Locker closed);
// when it is released, [ErrReleased]. It is also cancelled when parent is,
// with parent's cause. A lease that has already ended returns a context
// cancelled already. [Locker.Do] runs its fn with such a context.
//
// The context starts no goroutine: the lease cancels it as it ends, and a
// parent that ends first makes it forget the context (in a goroutine of
// [context.AfterFunc] that ends at once). Like [Lease.Done], it is
// cancelled only once the Locker notices the end: a holder paused past its
// lease cannot tell in time, and the fence is what protects the resource.
func (ls *Lease) Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ContextWithLease(parent, ls))
	held, err := ls.lockHeld()
	if !held {
		if err == nil {
			err = ErrReleased
		}
		cancel(err)
		return ctx
	}
	lc := &leaseCtx{cancel: cancel}
	if ls.ctxs == nil {
		ls.ctxs = make(map[*leaseCtx]struct{})
	}
	ls.ctxs[lc] = struct{}{}
	l := ls.l
	// Set under l.mu: the lease's end stops it before cancelling.
	lc.stop = context.AfterFunc(ctx, func() {
		l.mu.Lock()
		delete(ls.ctxs, lc)
		l.mu.Unlock()
	})
	l.mu.Unlock()
	return ctx
}

// endContextsLocked takes the contexts of ls out, for cancelContexts.
// Caller holds l.mu.
func (ls *Lease) endContextsLocked() map[*leaseCtx]struct{} {
	ctxs := ls.ctxs
	ls.ctxs = nil
	return ctxs
}

// cancelContexts cancels the contexts of an ended lease with cause. Caller
// does not hold l.mu.
func cancelContexts(ctxs map[*leaseCtx]struct{}, cause error) {
	for lc := range ctxs {
		lc.stop()
		lc.cancel(cause)
	}
}
