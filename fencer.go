package dlock

import "context"

// FenceRaiser is implemented by stores that can raise the fence counter of a
// lock while a token holds it. A quorum store (store/redlock) needs it to
// issue fences that are monotonic across independent nodes: after winning a
// quorum it writes the fence it will use back to the nodes it holds, so that
// every later grant on those nodes is issued a higher one. See
// docs/safety.md for the argument.
type FenceRaiser interface {
	// RaiseFence sets the fence counter of req.Name to max(counter, fence),
	// atomically with a check that req.Token holds the lock in req.Mode,
	// and returns nil. It returns [ErrNotHeld] when the token holds nothing;
	// the counter is then unchanged. It never lowers the counter. A
	// repeated Acquire by the holder may afterwards return either the
	// fence first issued or the raised one. In [ModeElection] (where
	// supported) it also makes the leadership's term max(term, fence) and
	// its value req.Value, as [Elector.Leader] then reports, and wakes the
	// name's watchers: store/redlock settles its majority's term with it.
	RaiseFence(ctx context.Context, req Request, fence int64) error
}
