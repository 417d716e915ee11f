package memory

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock"
)

var _ dlock.FenceRaiser = (*Store)(nil)

// RaiseFence implements [dlock.FenceRaiser]: while req.Token holds
// req.Name, it sets the lock's fence counter to max(counter, fence), so
// that the next grant on this store is issued a fence above fence. It
// returns [dlock.ErrNotHeld] when the token holds nothing. In
// [dlock.ModeElection] the leadership's term also becomes max(term, fence)
// and its value req.Value, and observers are woken (store/redlock settles
// the term of its majority with it).
func (s *Store) RaiseFence(ctx context.Context, req dlock.Request, fence int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := keyOf(req.Name, req.Mode)
	lk := s.live(k, time.Now())
	var h *holder
	if lk != nil {
		h = lk.find(req.Token)
	}
	if h == nil {
		return dlock.ErrNotHeld
	}
	if fence > s.fences[req.Name] {
		s.fences[req.Name] = fence
	}
	if req.Mode == dlock.ModeElection {
		h.fence = max(h.fence, fence)
		h.value = req.Value
		s.wakeLocked(k)
	}
	return nil
}
