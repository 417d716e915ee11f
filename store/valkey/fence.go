package valkey

import (
	"context"
	"fmt"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

var _ store.FenceRaiser = (*Store)(nil)

// RaiseFence implements [store.FenceRaiser] in one script, one round trip:
// while req.Token holds the lock, the lock's fence counter becomes
// max(counter, fence). It returns [store.ErrNotHeld] when the token holds
// nothing, an error wrapping [store.ErrNotSupported] for a mode without a
// write-back script (the mutex, the write side of the read-write lock
// and the election have one), [store.ErrInvalid] for a bad
// request, a [*store.StoreError] when the server did not answer, and under
// [WithWaitReplicas] a [*ReplicationError] when replicas did not confirm
// the raise (the server keeps it).
// A repeated Acquire of the mutex by the holder returns the raised fence
// afterwards; the write side keeps returning the fence it was granted.
func (s *Store) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
	o, err := s.ops(req.Mode)
	if err != nil || o.Raise == nil {
		return fmt.Errorf("%w: valkey store cannot raise the fence of mode %v", store.ErrNotSupported, req.Mode)
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
