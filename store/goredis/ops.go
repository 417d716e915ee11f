package goredis

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

func (s *Store) ops(m store.Mode) (*redisproto.Ops, error) {
	return redisproto.ModeOps(m, "goredis")
}

// run runs sc by EVALSHA, and by EVAL when the server does not know it.
func (s *Store) run(ctx context.Context, sc *redisproto.Script, keys, args []string) *redis.Cmd {
	argv := anys(args)
	cmd := s.client.EvalSha(ctx, sc.SHA, keys, argv...)
	if isNoScript(cmd.Err()) {
		cmd = s.client.Eval(ctx, sc.Src, keys, argv...)
	}
	return cmd
}

// anys returns args as go-redis takes arguments.
func anys(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

func isNoScript(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && redisproto.NoScript(re.Error())
}

// Acquire implements [store.Store]: one script, one round trip. It returns
// an error wrapping [store.ErrNotSupported] for a mode this store does not
// run, [store.ErrInvalid] for a bad request, and a [*store.StoreError] when
// the server could not be reached or did not answer (the grant may or may
// not have happened; asking again with the same token tells).
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	o, err := s.ops(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	if err := s.l.CheckRequest(req); err != nil {
		return store.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Grant{}, err
	}
	if s.isClosed() {
		return store.Grant{}, errClosed
	}
	if req.Mode == store.ModeMutex && req.Queue && !s.grants.Watching(s.l.GrantChannel(req.Name, req.Mode), req.Token) {
		// Register only a waiter that listens for its handoff (WatchGrant).
		req.Queue = false
	}
	c := s.run(ctx, o.Acquire, o.AcquireKeys(s.l, req), o.AcquireArgs(ctx, s.l, req))
	if f, ok := c.Val().(int64); ok {
		return redisproto.Granted(f)
	}
	v, err := c.Int64Slice()
	if err != nil {
		return store.Grant{}, fail("acquire", err)
	}
	g, err := redisproto.ParseGrant(v)
	if le, ok := err.(*store.LimitError); ok {
		le.Name, le.Asked = req.Name, req.Limit
		return store.Grant{}, le
	}
	if err != nil {
		return store.Grant{}, fmt.Errorf("dlock: goredis acquire: %w", err)
	}
	if !g.Acquired && req.Mode == store.ModeMutex {
		s.l.Contend(req.Name) // its releases send the full form
	}
	return g, nil
}

// Extend implements [store.Store]: all requests go out in one pipeline (one
// round trip per node of a cluster). Each error is nil, [store.ErrNotHeld],
// ErrNotSupported/ErrInvalid for that request, or a [*store.StoreError].
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
	errs := make([]error, len(reqs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	type call struct {
		i          int
		sc         *redisproto.Script
		keys, args []string
	}
	calls := make([]call, 0, len(reqs))
	for i, req := range reqs {
		o, err := s.ops(req.Mode)
		if err == nil {
			err = s.l.CheckRequest(req)
		}
		if err == nil && s.isClosed() {
			err = errClosed
		}
		if err != nil {
			errs[i] = err
			continue
		}
		calls = append(calls, call{i: i, sc: o.Extend, keys: o.ExtendKeys(s.l, req.Name), args: o.Args(s.l, req)})
	}
	if len(calls) == 0 {
		return errs
	}
	if len(calls) == 1 {
		c := calls[0]
		errs[c.i] = held("extend", s.run(ctx, c.sc, c.keys, c.args))
		return errs
	}
	cmds := make([]*redis.Cmd, len(calls))
	pipe := func(again []int, eval bool) {
		p := s.client.Pipeline()
		for _, j := range again {
			c := calls[j]
			if eval {
				cmds[j] = p.Eval(ctx, c.sc.Src, c.keys, anys(c.args)...)
			} else {
				cmds[j] = p.EvalSha(ctx, c.sc.SHA, c.keys, anys(c.args)...)
			}
		}
		p.Exec(ctx) // errors are per command
	}
	all := make([]int, len(calls))
	for j := range all {
		all[j] = j
	}
	pipe(all, false)
	var again []int
	for j, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, j)
		}
	}
	if len(again) > 0 {
		pipe(again, true)
	}
	for j, c := range cmds {
		errs[calls[j].i] = held("extend", c)
	}
	return errs
}

// held decodes the 1/0 reply of an extend or release script.
func held(op string, c *redis.Cmd) error {
	v, err := c.Int64()
	switch {
	case err != nil:
		return fail(op, err)
	case v == 0:
		return store.ErrNotHeld
	}
	return nil
}

// Release implements [store.Store]: one script, one round trip (a mutex
// release whose short form finds waiters it did not expect sends the full
// form: two; see [redisproto.Ops.ReleaseCall]). It returns
// [store.ErrNotHeld] when req.Token holds nothing, so a foreign holder's key
// is never touched. Waiters of this Store on the lock are woken at once.
// Releasing a mutex that has live registered waiters hands it to one of
// them in the same script (see [Store.WatchGrant]).
func (s *Store) Release(ctx context.Context, req store.Request) error {
	o, err := s.ops(req.Mode)
	if err != nil {
		return err
	}
	if err := s.l.CheckToken(req); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return errClosed
	}
	keys, args, short := o.ReleaseCall(s.l, req)
	c := s.run(ctx, o.Release, keys, args)
	if n, err := c.Int64(); short && err == nil && n == redisproto.ReleaseWaiters {
		// The name may have waiters: the full form hands over to them.
		s.l.Contend(req.Name)
		c = s.run(ctx, o.Release, o.Keys(s.l, req.Name), o.Args(s.l, req))
	}
	if err := held("release", c); err != nil {
		return err
	}
	if !s.hub.Idle() {
		s.hub.Wake(o.WatchKey(s.l, req.Name))
		if req.Mode != store.ModeMutex {
			s.hub.Wake(s.l.Key(req.Name)) // waiters of every pattern watch the main key
		}
	}
	return nil
}

// RaiseFence implements [store.FenceRaiser] in one script, one round trip:
// while req.Token holds the lock, the lock's fence counter becomes
// max(counter, fence). It returns [store.ErrNotHeld] when the token holds
// nothing, an error wrapping [store.ErrNotSupported] for a mode without a
// write-back script (the mutex, the write side of the read-write lock
// and the election have one), [store.ErrInvalid] for a bad request, and a
// [*store.StoreError] when the server did not answer.
func (s *Store) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
	o, err := s.ops(req.Mode)
	if err != nil || o.Raise == nil {
		return fmt.Errorf("%w: goredis store cannot raise the fence of mode %v", store.ErrNotSupported, req.Mode)
	}
	if err := s.l.CheckToken(req); err != nil {
		return err
	}
	if fence <= 0 || fence >= redisproto.MaxFence {
		return &store.InvalidError{Field: "fence", Reason: "must be positive and below 2^53"}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return held("fence", s.run(ctx, o.Raise, o.Keys(s.l, req.Name), o.RaiseArgs(s.l, req, fence)))
}
