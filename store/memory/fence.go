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
// returns [dlock.ErrNotHeld] when the token holds nothing.
func (s *Store) RaiseFence(ctx context.Context, req dlock.Request, fence int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lk := s.live(keyOf(req.Name, req.Mode), time.Now())
	if lk == nil || lk.find(req.Token) == nil {
		return dlock.ErrNotHeld
	}
	if fence > s.fences[req.Name] {
		s.fences[req.Name] = fence
	}
	return nil
}
