package zookeeper

import (
	"errors"
	"time"
)

// keptByMin returns the paths of the holds of this store kept by their
// MinHold: released (through this store, or marked released in the node
// through another) before grant + MinHold, which the reaper deletes then.
// A hold of this store not released yet is not kept: Close ends it. It
// reads the node only for a hold with a MinHold still running that this
// store did not see released (one read each).
func (s *Store) keptByMin() []string {
	s.mu.Lock()
	now := time.Now()
	var kept, check []string
	for p, l := range s.local {
		switch {
		case l.released:
			kept = append(kept, p)
		case l.owned && minRunning(l, now):
			check = append(check, p)
		}
	}
	s.mu.Unlock()
	for _, p := range check {
		d, _, err := s.readData(p)
		l := s.owned(p)
		if err == nil && d.Released && l != nil && s.keepUntil(p, l.minUntil) {
			kept = append(kept, p)
		} else if errors.Is(err, errMoved) {
			s.untrack(p) // ended elsewhere (ForceRelease, a move)
		}
	}
	return kept
}

// keptLeft reports the latest deadline among paths still kept by this
// store's reaper (false when none is).
func (s *Store) keptLeft(paths []string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last time.Time
	left := false
	for _, p := range paths {
		if l := s.local[p]; l != nil && l.released {
			left = true
			if l.deadline.After(last) {
				last = l.deadline
			}
		}
	}
	return last, left
}

// waitKept waits until the reaper has ended every hold kept by its
// MinHold (keptByMin) at its time: grant + MinHold, capped at its MaxHold
// end. It returns at once when there is none, and when the session
// expired meanwhile (its nodes are gone).
func (s *Store) waitKept() {
	paths := s.keptByMin()
	for {
		last, left := s.keptLeft(paths)
		if !left {
			return
		}
		wait := time.Until(last)
		if wait <= 0 {
			wait = orphanRetry // the reaper's pass at the deadline is due
		}
		t := time.NewTimer(wait)
		select {
		case <-s.reaped:
		case <-t.C:
		}
		t.Stop()
	}
}
