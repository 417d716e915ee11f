package store

import "context"

type fenceFloorKey struct{}

// WithFenceFloor returns ctx proposing floor, in fence units (µs of the
// Unix clock), to the stores an Acquire with it reaches. A quorum store
// (store/redlock) proposes one floor to every node of an acquire: every
// grant takes its node's own clock floor, and nodes' clocks differ, so
// without one proposal the nodes of one grant would issue different fences
// and the grant would need a fence write-back. A store that honours it
// issues the floor instead of its next fence when the floor is above that
// fence by at most 100 ms of its own clock floor (100 000 units); stores
// that do not ignore it.
func WithFenceFloor(ctx context.Context, floor int64) context.Context {
	return context.WithValue(ctx, fenceFloorKey{}, floor)
}

// FenceFloor returns the floor ctx proposes (see [WithFenceFloor]), and
// whether it proposes one.
func FenceFloor(ctx context.Context) (int64, bool) {
	f, ok := ctx.Value(fenceFloorKey{}).(int64)
	return f, ok
}

// MaxFloorLead is how far above its own clock floor, in fence units, a
// store takes a proposed floor: 100 ms.
const MaxFloorLead = 100_000
