package memory

import (
	"maps"

	"github.com/dlock-dev/dlock/internal/memsnap"
)

func init() {
	memsnap.Take = func(s any) any { return s.(*Store).snapshot() }
	memsnap.Restore = func(s, snap any) { s.(*Store).restore(snap.(*snapshot)) }
}

// snapshot is a copy of a Store's state: what a restart from a snapshot
// brings back. Watches are connections, not state: they are not in it.
type snapshot struct {
	locks  map[key]*lock
	fences map[string]int64
	mark   int64
}

// snapshot returns a deep copy of s's state.
func (s *Store) snapshot() *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &snapshot{locks: copyLocks(s.locks), fences: maps.Clone(s.fences), mark: s.mark}
}

// restore puts s back to snap (which it copies, so that it can be restored
// again) and wakes every watcher: any name may have changed.
func (s *Store) restore(snap *snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.locks, s.fences, s.mark = copyLocks(snap.locks), maps.Clone(snap.fences), snap.mark
	for k := range s.watchers {
		s.wakeLocked(k)
	}
}

func copyLocks(in map[key]*lock) map[key]*lock {
	out := make(map[key]*lock, len(in))
	for k, lk := range in {
		c := *lk
		c.holders = make([]*holder, len(lk.holders))
		for i, h := range lk.holders {
			hc := *h
			c.holders[i] = &hc
		}
		c.queue = make([]*waiter, len(lk.queue))
		for i, w := range lk.queue {
			wc := *w
			c.queue[i] = &wc
		}
		out[k] = &c
	}
	return out
}
