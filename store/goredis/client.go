package goredis

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/redisproto"
)

// driver is the Store's redisproto.Client on go-redis: the operations are
// redisproto.Store's.
type driver struct {
	c redis.UniversalClient
	// fns is the use of the scripts' function forms (see
	// redisproto.Function).
	fns redisproto.Functions
}

var _ redisproto.Client = (*driver)(nil)

// Eval implements redisproto.Client: by FCALL when the script has a
// function form (its library loaded, with the call again, on the first
// "Function not found"), by EVALSHA and EVAL otherwise.
func (d *driver) Eval(ctx context.Context, call redisproto.Call) redisproto.Reply {
	cmd := d.eval(ctx, call)
	if cmd.Err() != nil {
		try := func() *redis.Cmd { return d.eval(ctx, call) }
		cmd = redisproto.Settle(&d.fns, call.Script, cmd,
			func(c *redis.Cmd) (string, bool) { return d.ServerError(c.Err()) },
			func() *redis.Cmd { return d.loadAndCall(ctx, call, try) }, try)
	}
	return reply(cmd)
}

// eval sends call once: by FCALL when it has a function form and the
// server has functions, otherwise by EVALSHA, and by EVAL when the server
// does not know the script.
func (d *driver) eval(ctx context.Context, call redisproto.Call) *redis.Cmd {
	if fn := d.fns.Of(call.Script); fn != nil {
		return d.c.FCall(ctx, fn.Name, call.Keys, anys(call.Args)...)
	}
	argv := anys(call.Args)
	cmd := d.c.EvalSha(ctx, call.Script.SHA, call.Keys, argv...)
	if isNoScript(cmd.Err()) {
		cmd = d.c.Eval(ctx, call.Script.Src, call.Keys, argv...)
	}
	return cmd
}

// loadAndCall loads call's library and sends call again by FCALL (by try):
// in one pipeline off a cluster or ring (one connection, in order); on
// every master first otherwise (FUNCTION LOAD has no key to route by). A
// library that will not load turns functions off (the call then goes by
// EVALSHA).
func (d *driver) loadAndCall(ctx context.Context, call redisproto.Call, try func() *redis.Cmd) *redis.Cmd {
	fn := call.Script.Function()
	c, ok := d.c.(*redis.Client)
	if !ok {
		if !d.loadFunction(ctx, fn) {
			d.fns.Off()
		}
		return try()
	}
	p := c.Pipeline()
	load := p.FunctionLoad(ctx, fn.Lib)
	cmd := p.FCall(ctx, fn.Name, call.Keys, anys(call.Args)...)
	_, _ = p.Exec(ctx) // errors are per command
	if !d.loaded(load.Err()) {
		d.fns.Off()
		return try()
	}
	return cmd
}

// EvalMulti implements redisproto.Client: one call as Eval, several in a
// pipeline.
func (d *driver) EvalMulti(ctx context.Context, calls []redisproto.Call) []redisproto.Reply {
	if len(calls) == 1 {
		return []redisproto.Reply{d.Eval(ctx, calls[0])}
	}
	out := make([]redisproto.Reply, len(calls))
	cmds := make([]*redis.Cmd, len(calls))
	pipe := func(which []int, eval bool) {
		p := d.c.Pipeline()
		for _, i := range which {
			c := calls[i]
			fn := d.fns.Of(c.Script)
			switch {
			case fn != nil && !eval:
				cmds[i] = p.FCall(ctx, fn.Name, c.Keys, anys(c.Args)...)
			case eval:
				cmds[i] = p.Eval(ctx, c.Script.Src, c.Keys, anys(c.Args)...)
			default:
				cmds[i] = p.EvalSha(ctx, c.Script.SHA, c.Keys, anys(c.Args)...)
			}
		}
		_, _ = p.Exec(ctx) // errors are per command
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	pipe(all, false)
	for tries := 0; tries < 2; tries++ {
		var again []int
		for i, c := range cmds {
			if d.functionFailed(ctx, c.Err(), tries > 0, calls[i]) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		pipe(again, false)
	}
	var again []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe(again, true)
	}
	for i, c := range cmds {
		out[i] = reply(c)
	}
	return out
}

// functionFailed reports whether err, the answer to call in a pipeline,
// says that the call must be sent again because of its function form, and
// makes the next try work: the library loaded on every master (see
// redisproto.Functions.Retry; again: this call was sent again for its
// function before).
func (d *driver) functionFailed(ctx context.Context, err error, again bool, call redisproto.Call) bool {
	msg, ok := d.ServerError(err)
	return d.fns.Retry(msg, ok, again, call.Script, func(fn *redisproto.Function) bool { return d.loadFunction(ctx, fn) })
}

// loadFunction loads fn's library on every master. It reports whether one
// has it now.
func (d *driver) loadFunction(ctx context.Context, fn *redisproto.Function) bool {
	var mu sync.Mutex
	loaded := false
	_ = d.eachMaster(ctx, func(ctx context.Context, c redis.Cmdable, _ string) error {
		if d.loaded(c.FunctionLoad(ctx, fn.Lib).Err()) {
			mu.Lock()
			loaded = true
			mu.Unlock()
		}
		return nil
	})
	return loaded
}

// loaded reports whether err, FUNCTION LOAD's answer, leaves the library
// on the node: no error, or the library there already.
func (d *driver) loaded(err error) bool {
	msg, _ := d.ServerError(err)
	return err == nil || redisproto.LibraryExists(msg)
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

// reply converts a go-redis command's answer to a redisproto.Reply.
func reply(c *redis.Cmd) redisproto.Reply {
	if err := c.Err(); err != nil {
		return redisproto.ErrorReply(err)
	}
	return value(c.Val())
}

func value(v any) redisproto.Reply {
	switch v := v.(type) {
	case int64:
		return redisproto.IntReply(v)
	case string:
		return redisproto.StringReply(v)
	case []any:
		out := make([]redisproto.Reply, len(v))
		for i, e := range v {
			out[i] = value(e)
		}
		return redisproto.ArrayReply(out)
	case nil:
		return redisproto.NilReply()
	}
	return redisproto.ErrorReply(fmt.Errorf("dlock: goredis: unexpected reply %T", v))
}

// Scan implements redisproto.Client on every master.
func (d *driver) Scan(ctx context.Context, match string, fn func(key string)) error {
	var mu sync.Mutex
	return d.eachMaster(ctx, func(ctx context.Context, c redis.Cmdable, _ string) error {
		it := c.Scan(ctx, 0, match, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			fn(it.Val())
			mu.Unlock()
		}
		return it.Err()
	})
}

// Policies implements redisproto.Client on every master.
func (d *driver) Policies(ctx context.Context) []redisproto.NodePolicy {
	var mu sync.Mutex
	var out []redisproto.NodePolicy
	_ = d.eachMaster(ctx, func(ctx context.Context, c redis.Cmdable, addr string) error {
		m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		mu.Lock()
		out = append(out, redisproto.NodePolicy{Addr: addr, Policy: m["maxmemory-policy"], Err: err})
		mu.Unlock()
		return nil
	})
	return out
}

// eachMaster calls fn with a client of each master: every master of a
// cluster, every shard of a ring, or the client itself.
func (d *driver) eachMaster(ctx context.Context, fn func(ctx context.Context, c redis.Cmdable, addr string) error) error {
	node := func(ctx context.Context, c *redis.Client) error { return fn(ctx, c, c.Options().Addr) }
	switch c := d.c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, node)
	case *redis.Ring:
		return c.ForEachShard(ctx, node)
	case *redis.Client:
		return node(ctx, c)
	}
	return fn(ctx, d.c, "")
}

// Ping implements redisproto.Client.
func (d *driver) Ping(ctx context.Context) error { return d.c.Ping(ctx).Err() }

// ServerError implements redisproto.Client. A nil reply is not one: it is
// read as a failure to reach the server.
func (d *driver) ServerError(err error) (string, bool) {
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		return re.Error(), true
	}
	return "", false
}

// Closed implements redisproto.Client.
func (d *driver) Closed(err error) bool { return errors.Is(err, redis.ErrClosed) }

// Publish implements redisproto.Client.
func (d *driver) Publish(ctx context.Context, channel string, msg []byte, legacy bool) error {
	if legacy {
		return d.c.Publish(ctx, channel, msg).Err()
	}
	return d.c.SPublish(ctx, channel, msg).Err()
}

// Receive implements redisproto.Client on a pub/sub connection of its own
// (SSUBSCRIBE is routed to the channel's slot in a cluster).
func (d *driver) Receive(ctx context.Context, channel string, legacy bool, ready func(), onMessage func(string)) error {
	var ps *redis.PubSub
	if legacy {
		ps = d.c.Subscribe(ctx, channel)
	} else {
		ps = d.c.SSubscribe(ctx, channel)
	}
	// go-redis reads a pub/sub connection without watching ctx: closing
	// it ends the read.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer func() {
		stop()
		ps.Close()
	}()
	for {
		m, err := ps.Receive(ctx)
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "ssubscribe" || m.Kind == "subscribe" {
				ready()
			}
		case *redis.Message:
			onMessage(m.Payload)
		}
	}
}

// Unsubscribe has nothing to do: closing the channel's pub/sub connection,
// which Receive does when its ctx ends, unsubscribes it.
func (d *driver) Unsubscribe(context.Context, string, bool) {}

// SameNode implements redisproto.Client: a *redis.Client (one node, or a
// Sentinel failover client) serves every key, a *redis.ClusterClient those
// of one slot; other clients (a Ring) may spread any keys over nodes.
func (d *driver) SameNode(keys []string) bool {
	switch d.c.(type) {
	case *redis.Client:
		return true
	case *redis.ClusterClient:
		return redisproto.SameSlot(keys)
	}
	return false
}
