package valkey

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// ops returns the scripts of mode m, or an error wrapping
// [store.ErrNotSupported].
func (s *Store) ops(m store.Mode) (*redisproto.Ops, error) {
	return redisproto.ModeOps(m, "valkey")
}

func (s *Store) checkRequest(req store.Request) error { return s.l.CheckRequest(req) }

// fail classifies an error of operation op: failures to reach the server or
// transient server states become a [*store.StoreError] (wrapping
// [store.ErrUnavailable], so callers retry); other error replies (a key of
// the wrong type, a script error) and use after Close are returned wrapped,
// not as unavailability, so that waiting callers stop.
func fail(op string, err error) error {
	if errors.Is(err, vk.ErrClosing) {
		return fmt.Errorf("dlock: valkey %s: store closed: %w", op, err)
	}
	if ve, ok := vk.IsValkeyErr(err); ok {
		if redisproto.Transient(ve.Error()) {
			return &store.StoreError{Op: op, Node: -1, Err: err}
		}
		return fmt.Errorf("dlock: valkey %s: %w", op, err)
	}
	return &store.StoreError{Op: op, Node: -1, Err: err}
}

// staleRetries bounds how often a call is sent again after it met a broken
// connection (see stale).
const staleRetries = 4

// stale reports whether err is a connection that broke under the call: the
// server closed it, restarted or failed over. valkey-go keeps several
// connections per server (two on 2 cores, four from 4) and picks one per
// call; one that was idle when the server went away fails its next call so,
// once, and is replaced. Every script is idempotent per token, so the call
// is sent again: a repeated acquire or extend gets the answer the first
// would have, and a release repeated after the first took effect reports
// that the token holds nothing.
func stale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// do runs cmds (built by build, with EVAL instead of EVALSHA when eval is
// set) in one round trip, and again with EVAL for those that the server
// did not know by SHA. A batch that met a broken connection is sent again
// (see stale).
func (s *Store) do(ctx context.Context, n int, build func(i int, eval bool) vk.Completed) []vk.ValkeyResult {
	if n == 1 {
		return []vk.ValkeyResult{s.do1(ctx, s.direct(ctx), func(eval bool) vk.Completed { return build(0, eval) })}
	}
	c := s.direct(ctx)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	res := doMulti(ctx, c, all, build, false)
	var again []int
	for i, r := range res {
		if isNoScript(r.Error()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return res
	}
	for j, r := range doMulti(ctx, c, again, build, true) {
		res[again[j]] = r
	}
	return res
}

// doMulti sends the calls which (built by build) in one round trip on c,
// again while they meet a broken connection (see stale).
func doMulti(ctx context.Context, c vk.Client, which []int, build func(i int, eval bool) vk.Completed, eval bool) []vk.ValkeyResult {
	cmds := make(vk.Commands, len(which))
	return send(ctx, func(bool) []vk.ValkeyResult {
		for j, i := range which {
			cmds[j] = build(i, eval)
		}
		return c.DoMulti(ctx, cmds...)
	}, firstErr, nil)
}

// do1 is do for one command on c: Do, which costs less than a DoMulti of
// one.
func (s *Store) do1(ctx context.Context, c vk.Client, build func(eval bool) vk.Completed) vk.ValkeyResult {
	return send(ctx, func(eval bool) vk.ValkeyResult {
		return c.Do(ctx, build(eval))
	}, vk.ValkeyResult.Error, vk.ValkeyResult.Error)
}

// send makes a call with try (by EVALSHA, or EVAL when eval is set) and
// makes it again while connErr of the answer is a broken connection (see
// stale; at most staleRetries more times, while ctx lasts), and once with
// EVAL when scriptErr of the answer says the server did not know the
// script by SHA (scriptErr nil: never).
func send[T any](ctx context.Context, try func(eval bool) T, connErr, scriptErr func(T) error) T {
	eval, tries := false, 0
	for {
		r := try(eval)
		switch {
		case stale(connErr(r)) && tries < staleRetries && ctx.Err() == nil:
			tries++
		case scriptErr != nil && !eval && isNoScript(scriptErr(r)):
			eval = true
		default:
			return r
		}
	}
}

// firstErr is the error of the first answer of a round trip: a broken
// connection fails them all.
func firstErr(res []vk.ValkeyResult) error { return res[0].Error() }

// Acquire implements [store.Store]: one script, one round trip (plus WAIT
// in the same round trip under [WithWaitReplicas], after every attempt,
// granted or not). It returns an error
// wrapping [store.ErrNotSupported] for a mode this store does not run,
// [store.ErrInvalid] for a bad request, a [*store.StoreError] when the
// server could not be reached or did not answer (the grant may or may not
// have happened; asking again with the same token tells), and a
// [*ReplicationError] when replicas did not confirm the grant (which was
// released before returning).
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	o, err := s.ops(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	if err := s.checkRequest(req); err != nil {
		return store.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Grant{}, err
	}
	if req.Mode == store.ModeMutex && req.Queue && !s.watching(req.Name, req.Mode, req.Token) {
		// Register only a waiter that listens for its handoff (WatchGrant).
		req.Queue = false
	}
	keys, args := o.AcquireKeys(s.l, req), o.AcquireArgs(ctx, s.l, req)
	// While this Store has waiters on the lock, the attempt is a tracked
	// read of the watch key (see hub): CLIENT CACHING YES just before the
	// script, on the same connection, in the same round trip.
	var watchKey string
	var watchGen uint64
	if s.trackAcquire && o.ReadsWatchKey && !s.hub.Idle() {
		k := o.WatchKey(s.l, req.Name)
		if gen, ok := s.hub.Tracked(k); ok {
			watchKey, watchGen = k, gen
		}
	}
	var (
		res  []vk.ValkeyResult
		rerr error // under WithWaitReplicas: nil, or the grant is not confirmed
		at   int   // res[at] is the script's reply
	)
	acquire := func(eval bool) vk.Completed { return cmd(s.client, o.Acquire, keys, args, eval) }
	switch {
	case s.cfg.waitReplicas > 0: // never tracked (see Open)
		var rerrs []error
		res, rerrs = s.confirmed(ctx, "acquire", []string{req.Name}, func(_ int, eval bool) vk.Completed { return acquire(eval) })
		rerr = rerrs[0]
	case watchKey == "":
		res = []vk.ValkeyResult{s.do1(ctx, s.direct(ctx), acquire)}
	default:
		// A tracked read: on the connection that tracks.
		at = 1
		res = send(ctx, func(eval bool) []vk.ValkeyResult {
			return s.client.DoMulti(ctx, s.client.B().ClientCaching().Yes().Build(), acquire(eval))
		}, firstErr, func(res []vk.ValkeyResult) error { return res[at].Error() })
	}
	if err := res[at].Error(); err != nil {
		return store.Grant{}, fail("acquire", err)
	}
	g, err := parseGrant(res[at])
	if le, ok := err.(*store.LimitError); ok {
		le.Name, le.Asked = req.Name, req.Limit
		return store.Grant{}, le
	}
	if err != nil {
		return store.Grant{}, fmt.Errorf("dlock: valkey acquire: %w", err)
	}
	if !g.Acquired && req.Mode == store.ModeMutex {
		s.l.Contend(req.Name) // its releases send the full form
	}
	// Only a refusal is sure to have read the key (readsWatchKey); a grant
	// wrote it, which ends its tracking anyway.
	if watchKey != "" && res[0].Error() == nil && !g.Acquired {
		s.hub.Armed(watchKey, watchGen)
	}
	if !g.Acquired || rerr == nil {
		return g, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), setupTimeout)
	defer cancel()
	if err := s.Release(rctx, req); err != nil && !errors.Is(err, store.ErrNotHeld) {
		return store.Grant{}, errors.Join(rerr, err)
	}
	return store.Grant{}, rerr
}

// Extend implements [store.Store]: all requests go out in one pipelined
// round trip (per node of a cluster; under [WithWaitReplicas], followed by
// WAIT, per hash slot). Each error is nil, [store.ErrNotHeld],
// ErrNotSupported/ErrInvalid for that request, a [*store.StoreError], or a
// [*ReplicationError] when replicas did not confirm the extension: the
// server keeps the new TTL, and the caller must count on the old one (a
// dlock.Lease does: the error is not ErrNotHeld).
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
		o          *redisproto.Ops
		keys, args []string
	}
	calls := make([]call, 0, len(reqs))
	for i, req := range reqs {
		o, err := s.ops(req.Mode)
		if err == nil {
			err = s.checkRequest(req)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		calls = append(calls, call{i, o, o.ExtendKeys(s.l, req.Name), o.Args(s.l, req)})
	}
	if len(calls) == 0 {
		return errs
	}
	build := func(j int, eval bool) vk.Completed {
		c := calls[j]
		return cmd(s.client, c.o.Extend, c.keys, c.args, eval)
	}
	var res []vk.ValkeyResult
	var rerrs []error // under WithWaitReplicas: whether replicas confirmed each
	if s.cfg.waitReplicas > 0 {
		names := make([]string, len(calls))
		for j, c := range calls {
			names[j] = reqs[c.i].Name
		}
		res, rerrs = s.confirmed(ctx, "extend", names, build)
	} else {
		res = s.do(ctx, len(calls), build)
	}
	for j, r := range res {
		err := held("extend", r)
		if err == nil && rerrs != nil {
			err = rerrs[j]
		}
		errs[calls[j].i] = err
	}
	return errs
}

// held decodes the 1/0 reply of an extend or release script.
func held(op string, r vk.ValkeyResult) error {
	v, err := r.AsInt64()
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
// them in the same script (see [Store.WatchGrant]); a Release by a
// registered waiter's token drops its registration.
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
	keys, args, short := o.ReleaseCall(s.l, req)
	release := func(eval bool) vk.Completed {
		return cmd(s.client, o.Release, keys, args, eval)
	}
	c := s.direct(ctx)
	res := s.do1(ctx, c, release)
	if n, err := res.AsInt64(); short && err == nil && n == redisproto.ReleaseWaiters {
		// The name may have waiters: the full form hands over to them.
		s.l.Contend(req.Name)
		keys, args = o.Keys(s.l, req.Name), o.Args(s.l, req)
		res = s.do1(ctx, c, release)
	}
	if err := held("release", res); err != nil {
		return err
	}
	if !s.hub.Idle() {
		s.hub.Wake(o.WatchKey(s.l, req.Name))
		if req.Mode != store.ModeMutex {
			s.hub.Wake(s.key(req.Name)) // waiters of every pattern watch the main key
		}
	}
	return nil
}
