package memory

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/store"
)

var _ store.FenceRaiser = (*Store)(nil)

// RaiseFence implements [store.FenceRaiser]: while req.Token holds
// req.Name, it sets the lock's fence counter to max(counter, fence), so
// that the next grant on this store is issued a fence above fence. It
// returns [store.ErrNotHeld] when the token holds nothing. In
// [store.ModeElection] the leadership's term also becomes max(term, fence)
// and its value req.Value, and observers are woken (store/redlock settles
// the term of its majority with it).
func (s *Store) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
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
		return store.ErrNotHeld
	}
	if fence > s.fences[req.Name] {
		s.fences[req.Name] = fence
	}
	s.mark = max(s.mark, fence)
	if req.Mode == store.ModeElection {
		h.fence = max(h.fence, fence)
		h.value = req.Value
		s.wakeLocked(k)
	}
	return nil
}
