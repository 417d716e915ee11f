package valkey

import (
	"context"
	"fmt"
	"strconv"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
)

var _ dlock.FenceRaiser = (*Store)(nil)

// raiseScripts holds the fence write-back script of each mode that has one.
var raiseScripts = map[dlock.Mode]*script{
	dlock.ModeMutex: loadScript("scripts/mutex_raise_fence.lua"),
	dlock.ModeWrite: loadScript("scripts/rw_raise_fence.lua"),
}

// maxFence is the largest fence a Lua number holds exactly (2^53).
const maxFence = 1 << 53

// RaiseFence implements [dlock.FenceRaiser] in one script, one round trip:
// while req.Token holds the lock, the lock's fence counter becomes
// max(counter, fence). It returns [dlock.ErrNotHeld] when the token holds
// nothing, an error wrapping [dlock.ErrNotSupported] for a mode without a
// write-back script (the mutex and the write side of the read-write lock
// have one), [dlock.ErrInvalid] for a bad
// request, and a [*dlock.StoreError] when the server did not answer.
// A repeated Acquire of the mutex by the holder returns the raised fence
// afterwards; the write side keeps returning the fence it was granted.
func (s *Store) RaiseFence(ctx context.Context, req dlock.Request, fence int64) error {
	sc := raiseScripts[req.Mode]
	o, err := s.ops(req.Mode)
	if sc == nil || err != nil {
		return fmt.Errorf("%w: valkey store cannot raise the fence of mode %v", dlock.ErrNotSupported, req.Mode)
	}
	if err := dlock.ValidName(req.Name); err != nil {
		return err
	}
	if req.Token == "" {
		return &dlock.InvalidError{Field: "token", Reason: "must not be empty"}
	}
	if fence <= 0 || fence >= maxFence {
		return &dlock.InvalidError{Field: "fence", Reason: "must be positive and below 2^53"}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	keys := o.keys(s, req.Name)
	args := []string{req.Token, strconv.FormatInt(fence, 10), s.retention}
	res := s.do(ctx, 1, func(_ int, eval bool) vk.Completed {
		return sc.cmd(s.client, keys, args, eval)
	})
	return held("fence", res[0])
}
