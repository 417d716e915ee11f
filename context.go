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
		if n.lease.Name() == name && !n.lease.ended() {
			return n.lease
		}
	}
	return nil
}

func joinErrs(errs ...error) error { return errors.Join(errs...) }
