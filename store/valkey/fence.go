package valkey

import (
	"context"
	"fmt"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisproto"
)

var _ dlock.FenceRaiser = (*Store)(nil)

// RaiseFence implements [dlock.FenceRaiser] in one script, one round trip:
// while req.Token holds the lock, the lock's fence counter becomes
// max(counter, fence). It returns [dlock.ErrNotHeld] when the token holds
// nothing, an error wrapping [dlock.ErrNotSupported] for a mode without a
// write-back script (the mutex, the write side of the read-write lock
// and the election have one), [dlock.ErrInvalid] for a bad
// request, a [*dlock.StoreError] when the server did not answer, and under
// [WithWaitReplicas] a [*ReplicationError] when replicas did not confirm
// the raise (the server keeps it).
// A repeated Acquire of the mutex by the holder returns the raised fence
// afterwards; the write side keeps returning the fence it was granted.
func (s *Store) RaiseFence(ctx context.Context, req dlock.Request, fence int64) error {
	o, err := s.ops(req.Mode)
	if err != nil || o.Raise == nil {
		return fmt.Errorf("%w: valkey store cannot raise the fence of mode %v", dlock.ErrNotSupported, req.Mode)
	}
	if err := s.l.CheckToken(req); err != nil {
		return err
	}
	if fence <= 0 || fence >= redisproto.MaxFence {
		return &dlock.InvalidError{Field: "fence", Reason: "must be positive and below 2^53"}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	keys, args := o.Keys(s.l, req.Name), o.RaiseArgs(s.l, req, fence)
	raise := func(_ int, eval bool) vk.Completed {
		return cmd(s.client, o.Raise, keys, args, eval)
	}
	if s.cfg.waitReplicas == 0 {
		return held("fence", s.do(ctx, 1, raise)[0])
	}
	res, rerrs := s.confirmed(ctx, "fence", []string{req.Name}, raise)
	if err := held("fence", res[0]); err != nil {
		return err
	}
	return rerrs[0]
}
