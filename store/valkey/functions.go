package valkey

import (
	"context"

	"github.com/dlock-dev/dlock/internal/redisproto"
)

// The hot scripts go by FCALL (see redisproto.Function).

// functionFailed reports whether err, the answer to call, says that the
// call must be sent again because of its function form, and makes the
// next try work (see redisproto.Functions.Retry; again: this call was
// sent again for its function before).
func (d *driver) functionFailed(ctx context.Context, err error, again bool, call redisproto.Call) bool {
	msg, ok := d.ServerError(err)
	return d.fns.Retry(msg, ok, again, call.Script, func(fn *redisproto.Function) bool {
		return d.loadFunction(ctx, fn)
	})
}

// loadFunction loads fn's library on every node valkey-go knows (a
// cluster's masters each serve their slots; a replica refuses, and has it
// from its master). It reports whether a node has it now.
func (d *driver) loadFunction(ctx context.Context, fn *redisproto.Function) bool {
	loaded := false
	for _, n := range d.c.Nodes() {
		err := n.Do(ctx, n.B().FunctionLoad().FunctionCode(fn.Lib).Build()).Error()
		msg, _ := d.ServerError(err)
		if err == nil || redisproto.LibraryExists(msg) {
			loaded = true
		}
	}
	return loaded
}
