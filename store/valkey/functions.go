package valkey

import (
	"context"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
)

// The hot scripts go by FCALL (see redisproto.Function). A call that finds
// its function missing costs one more round trip, as one that found its
// script missing did: the library's load and the call again, together.

// settle is Eval's answer to call after r, the error its first try on c
// (by try) met: r, or the call's answer once sent again as r asks (see
// redisproto.Settle).
func (d *driver) settle(ctx context.Context, c vk.Client, call redisproto.Call, try func(bool) vk.ValkeyResult, r vk.ValkeyResult) vk.ValkeyResult {
	return redisproto.Settle(&d.fns, call.Script, r,
		func(r vk.ValkeyResult) (string, bool) { return d.ServerError(r.Error()) },
		func() vk.ValkeyResult { return d.loadAndCall(ctx, c, call, try) },
		func() vk.ValkeyResult { return send(ctx, try, vk.ValkeyResult.Error, vk.ValkeyResult.Error) })
}

// loadAndCall loads call's library and sends call again by FCALL: in one
// round trip on c, off a cluster (one connection, in order); on a cluster,
// on every master first (FUNCTION LOAD has no key to route by), then the
// call. A library that will not load turns functions off (the call then
// goes by EVALSHA).
func (d *driver) loadAndCall(ctx context.Context, c vk.Client, call redisproto.Call, try func(bool) vk.ValkeyResult) vk.ValkeyResult {
	fn := call.Script.Function()
	if d.c.Mode() == vk.ClientModeCluster {
		if !d.loadFunction(ctx, fn) {
			d.fns.Off()
		}
		return send(ctx, try, vk.ValkeyResult.Error, vk.ValkeyResult.Error)
	}
	res := send(ctx, func(bool) []vk.ValkeyResult {
		return c.DoMulti(ctx, c.B().FunctionLoad().FunctionCode(fn.Lib).Build(), d.cmd(call, false))
	}, firstErr, nil)
	if !d.loaded(res[0].Error()) {
		d.fns.Off()
		return send(ctx, try, vk.ValkeyResult.Error, vk.ValkeyResult.Error)
	}
	return res[1]
}

// functionFailed reports whether err, the answer to call in a batch, says
// that the call must be sent again because of its function form, and makes
// the next try work: the library loaded on every node (see
// redisproto.Functions.Retry; again: this call was sent again for its
// function before).
func (d *driver) functionFailed(ctx context.Context, err error, again bool, call redisproto.Call) bool {
	msg, ok := d.ServerError(err)
	return d.fns.Retry(msg, ok, again, call.Script, func(fn *redisproto.Function) bool { return d.loadFunction(ctx, fn) })
}

// loadFunction loads fn's library on every node valkey-go knows (a
// cluster's masters each serve their slots; a replica refuses, and has it
// from its master). It reports whether a node has it now.
func (d *driver) loadFunction(ctx context.Context, fn *redisproto.Function) bool {
	loaded := false
	for _, n := range d.c.Nodes() {
		if d.loaded(n.Do(ctx, n.B().FunctionLoad().FunctionCode(fn.Lib).Build()).Error()) {
			loaded = true
		}
	}
	return loaded
}

// loaded reports whether err, FUNCTION LOAD's answer, leaves the library
// on the node: no error, or the library there already.
func (d *driver) loaded(err error) bool {
	msg, _ := d.ServerError(err)
	return err == nil || redisproto.LibraryExists(msg)
}
