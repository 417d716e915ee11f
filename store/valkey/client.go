package valkey

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
)

// driver is the Store's redisproto.Client on valkey-go: the operations are
// redisproto.Store's; the driver picks the client and connection of each
// call and sends a call again after a broken connection.
type driver struct {
	l *redisproto.Layout
	// c is the client with client-side caching, whose connections are
	// always read (invalidation pushes, subscriptions), or the only one.
	c vk.Client
	// plain runs the scripts that need no tracked read: a client of the
	// same options without client-side caching, whose connections a lone
	// caller uses directly (a client with an invalidation hook sends every
	// command through its pipeline goroutines). Nil: c runs them.
	plain vk.Client
	// waitReplicas and waitTimeout are WithWaitReplicas's (replicas.go).
	waitReplicas int
	waitTimeout  time.Duration
	// fns is the use of the scripts' function forms (functions.go).
	fns redisproto.Functions
}

var _ redisproto.Client = (*driver)(nil)

// direct returns the client for a call for ctx that needs no tracked read:
// plain when ctx has a deadline or never ends. valkey-go runs a lone call
// on plain's connection directly, bounded by its deadline; a call that
// ctx may cancel without one goes through c's pipeline, which gives it up
// at once when ctx ends.
func (d *driver) direct(ctx context.Context) vk.Client {
	if d.plain == nil {
		return d.c
	}
	if _, ok := ctx.Deadline(); ok || ctx.Done() == nil {
		return d.plain
	}
	return d.c
}

// Eval implements redisproto.Client by Do, on the client direct picks.
func (d *driver) Eval(ctx context.Context, call redisproto.Call) redisproto.Reply {
	c := d.direct(ctx)
	try := func(eval bool) vk.ValkeyResult { return c.Do(ctx, d.cmd(call, eval)) }
	r := send(ctx, try, vk.ValkeyResult.Error, vk.ValkeyResult.Error)
	if r.Error() != nil {
		r = d.settle(ctx, c, call, try, r)
	}
	return reply(r)
}

// EvalMulti implements redisproto.Client by DoMulti (one call by Do, which
// costs less than a DoMulti of one), on the client direct picks.
func (d *driver) EvalMulti(ctx context.Context, calls []redisproto.Call) []redisproto.Reply {
	if len(calls) == 1 {
		return []redisproto.Reply{d.Eval(ctx, calls[0])}
	}
	out := make([]redisproto.Reply, len(calls))
	for i, r := range d.do(ctx, d.direct(ctx), calls) {
		out[i] = reply(r)
	}
	return out
}

// cmd builds the command of call: FCALL when its script has a function
// form and the server has functions (see functions.go), and otherwise
// EVALSHA, or EVAL when eval is set.
func (d *driver) cmd(call redisproto.Call, eval bool) vk.Completed {
	sc, keys, args := call.Script, call.Keys, call.Args
	if fn := d.fns.Of(sc); fn != nil && !eval {
		return d.c.B().Fcall().Function(fn.Name).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return d.evalCmd(call, eval)
}

// evalCmd builds the EVALSHA command of call, or the EVAL command when
// eval is set.
func (d *driver) evalCmd(call redisproto.Call, eval bool) vk.Completed {
	sc, keys, args := call.Script, call.Keys, call.Args
	if eval {
		return d.c.B().Eval().Script(sc.Src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return d.c.B().Evalsha().Sha1(sc.SHA).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func isNoScript(err error) bool {
	ve, ok := vk.IsValkeyErr(err)
	return ok && ve.IsNoScript()
}

// EvalTracked implements redisproto.Tracker: CLIENT CACHING YES and the
// call in one round trip on c, whose connections track. The call goes by
// EVALSHA, as every tracked read did before the function forms (a waiter's
// attempt, off the uncontended path they are for).
func (d *driver) EvalTracked(ctx context.Context, call redisproto.Call) (redisproto.Reply, bool) {
	res := send(ctx, func(eval bool) []vk.ValkeyResult {
		return d.c.DoMulti(ctx, d.c.B().ClientCaching().Yes().Build(), d.evalCmd(call, eval))
	}, firstErr, func(res []vk.ValkeyResult) error { return res[1].Error() })
	return reply(res[1]), res[0].Error() == nil
}

// reply converts a valkey-go result to a redisproto.Reply.
func reply(r vk.ValkeyResult) redisproto.Reply {
	m, err := r.ToMessage()
	if err != nil {
		return redisproto.ErrorReply(err)
	}
	return message(m)
}

func message(m vk.ValkeyMessage) redisproto.Reply {
	switch {
	case m.IsInt64():
		n, _ := m.AsInt64()
		return redisproto.IntReply(n)
	case m.IsString():
		s, _ := m.ToString()
		return redisproto.StringReply(s)
	case m.IsArray():
		a, _ := m.ToArray()
		out := make([]redisproto.Reply, len(a))
		for i := range a {
			out[i] = message(a[i])
		}
		return redisproto.ArrayReply(out)
	case m.IsNil():
		return redisproto.NilReply()
	}
	return redisproto.ErrorReply(fmt.Errorf("dlock: valkey: unexpected reply %s", m.String()))
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

// do runs calls on c in one round trip, and again with EVAL those that
// the server did not know by SHA. A batch that met a broken connection is
// sent again (see stale).
func (d *driver) do(ctx context.Context, c vk.Client, calls []redisproto.Call) []vk.ValkeyResult {
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	res := d.doMulti(ctx, c, calls, all, false)
	for tries := 0; tries < 2; tries++ {
		var again []int
		for i, r := range res {
			if d.functionFailed(ctx, r.Error(), tries > 0, calls[i]) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		for j, r := range d.doMulti(ctx, c, calls, again, false) {
			res[again[j]] = r
		}
	}
	var again []int
	for i, r := range res {
		if isNoScript(r.Error()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return res
	}
	for j, r := range d.doMulti(ctx, c, calls, again, true) {
		res[again[j]] = r
	}
	return res
}

// doMulti sends the calls which (by EVAL when eval is set) in one round
// trip on c, again while they meet a broken connection (see stale).
func (d *driver) doMulti(ctx context.Context, c vk.Client, calls []redisproto.Call, which []int, eval bool) []vk.ValkeyResult {
	cmds := make(vk.Commands, len(which))
	return send(ctx, func(bool) []vk.ValkeyResult {
		for j, i := range which {
			cmds[j] = d.cmd(calls[i], eval)
		}
		return c.DoMulti(ctx, cmds...)
	}, firstErr, nil)
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

// Scan implements redisproto.Client on every node valkey-go knows, but
// replicas (which refuse SCAN with READONLY).
func (d *driver) Scan(ctx context.Context, match string, fn func(key string)) error {
	for _, n := range d.c.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
			if err != nil {
				if isReplicaOnly(err) {
					break
				}
				return err
			}
			for _, k := range e.Elements {
				fn(k)
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

func isReplicaOnly(err error) bool {
	ve, ok := vk.IsValkeyErr(err)
	return ok && strings.HasPrefix(ve.Error(), "READONLY")
}

// Policies implements redisproto.Client on every node valkey-go knows.
func (d *driver) Policies(ctx context.Context) []redisproto.NodePolicy {
	var out []redisproto.NodePolicy
	for addr, n := range d.c.Nodes() {
		m, err := n.Do(ctx, n.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
		out = append(out, redisproto.NodePolicy{Addr: addr, Policy: m["maxmemory-policy"], Err: err})
	}
	return out
}

// Ping implements redisproto.Client.
func (d *driver) Ping(ctx context.Context) error {
	return d.c.Do(ctx, d.c.B().Ping().Build()).Error()
}

// ServerError implements redisproto.Client.
func (d *driver) ServerError(err error) (string, bool) {
	if ve, ok := vk.IsValkeyErr(err); ok {
		return ve.Error(), true
	}
	return "", false
}

// Closed implements redisproto.Client.
func (d *driver) Closed(err error) bool { return errors.Is(err, vk.ErrClosing) }

// Publish implements redisproto.Client.
func (d *driver) Publish(ctx context.Context, channel string, msg []byte, legacy bool) error {
	cmd := d.c.B().Spublish().Channel(channel).Message(vk.BinaryString(msg)).Build()
	if legacy {
		cmd = d.c.B().Publish().Channel(channel).Message(vk.BinaryString(msg)).Build()
	}
	return d.c.Do(ctx, cmd).Error()
}

// Receive implements redisproto.Client on valkey-go's shared connection
// (RESP3 push).
func (d *driver) Receive(ctx context.Context, channel string, legacy bool, ready func(), onMessage func(string)) error {
	hctx := vk.WithOnSubscriptionHook(ctx, func(ps vk.PubSubSubscription) {
		if ps.Kind == "ssubscribe" || ps.Kind == "subscribe" {
			ready()
		}
	})
	cmd := d.c.B().Ssubscribe().Channel(channel).Build()
	if legacy {
		cmd = d.c.B().Subscribe().Channel(channel).Build()
	}
	return d.c.Receive(hctx, cmd, func(m vk.PubSubMessage) { onMessage(m.Message) })
}

// Unsubscribe implements redisproto.Client.
func (d *driver) Unsubscribe(ctx context.Context, channel string, legacy bool) {
	cmd := d.c.B().Sunsubscribe().Channel(channel).Build()
	if legacy {
		cmd = d.c.B().Unsubscribe().Channel(channel).Build()
	}
	d.c.Do(ctx, cmd)
}

// SameNode implements redisproto.Client.
func (d *driver) SameNode(keys []string) bool {
	return d.c.Mode() != vk.ClientModeCluster || redisproto.SameSlot(keys)
}
