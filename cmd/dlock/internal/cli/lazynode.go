package cli

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

var (
	_ store.Store       = (*lazyNode)(nil)
	_ store.FenceRaiser = (*lazyNode)(nil)
	_ store.Pinger      = (*lazyNode)(nil)
	_ store.Inspector   = (*lazyNode)(nil)
	_ store.Elector     = (*lazyNode)(nil)
)

// redialEvery is how often a Redlock node that could not be reached is
// dialled again.
const redialEvery = time.Second

// lazyNode is one Redlock node that may be down when dlock starts: a
// Redlock quorum tolerates a minority of unreachable nodes, so a node that
// does not answer is not an error at start. Until it is reached, every
// operation fails with a [*dlock.StoreError] and the node is dialled again,
// at most once per redialEvery, by the next operation.
type lazyNode struct {
	url  string
	opts []valkey.Option
	log  *slog.Logger

	mu     sync.Mutex
	st     *valkey.Store
	err    error
	tried  time.Time
	closed bool
}

func (n *lazyNode) get(ctx context.Context) (*valkey.Store, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.st != nil || n.closed {
		if n.closed {
			return nil, dlock.ErrClosed
		}
		return n.st, nil
	}
	if time.Since(n.tried) < redialEvery {
		return nil, n.err
	}
	n.tried = time.Now()
	st, err := valkey.Dial(ctx, n.url, n.opts...)
	if err != nil {
		if !errors.Is(err, dlock.ErrUnavailable) && !errors.Is(err, dlock.ErrInvalid) {
			err = &dlock.StoreError{Op: "dial", Node: -1, Err: err}
		}
		n.err = err
		return nil, err
	}
	n.log.Info("dlock: redlock node reachable", "url", redactURL(n.url))
	n.st, n.err = st, nil
	return st, nil
}

func (n *lazyNode) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	st, err := n.get(ctx)
	if err != nil {
		return store.Grant{}, err
	}
	return st.Acquire(ctx, req)
}

func (n *lazyNode) Extend(ctx context.Context, reqs []dlock.Request) []error {
	st, err := n.get(ctx)
	if err != nil {
		errs := make([]error, len(reqs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return st.Extend(ctx, reqs)
}

func (n *lazyNode) Release(ctx context.Context, req dlock.Request) error {
	st, err := n.get(ctx)
	if err != nil {
		return err
	}
	return st.Release(ctx, req)
}

func (n *lazyNode) Watch(ctx context.Context, name string, mode dlock.Mode) (<-chan struct{}, func(), error) {
	st, err := n.get(ctx)
	if err != nil {
		return nil, nil, err
	}
	return st.Watch(ctx, name, mode)
}

func (n *lazyNode) RaiseFence(ctx context.Context, req dlock.Request, fence int64) error {
	st, err := n.get(ctx)
	if err != nil {
		return err
	}
	return st.RaiseFence(ctx, req, fence)
}

func (n *lazyNode) State(ctx context.Context, name string) (store.State, error) {
	st, err := n.get(ctx)
	if err != nil {
		return store.State{}, err
	}
	return st.State(ctx, name)
}

func (n *lazyNode) List(ctx context.Context) ([]store.State, error) {
	st, err := n.get(ctx)
	if err != nil {
		return nil, err
	}
	return st.List(ctx)
}

func (n *lazyNode) Leader(ctx context.Context, name string) (dlock.Leader, error) {
	st, err := n.get(ctx)
	if err != nil {
		return dlock.Leader{}, err
	}
	return st.Leader(ctx, name)
}

func (n *lazyNode) Ping(ctx context.Context) error {
	st, err := n.get(ctx)
	if err != nil {
		return err
	}
	return st.Ping(ctx)
}

func (n *lazyNode) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	if n.st != nil {
		return n.st.Close()
	}
	return nil
}
