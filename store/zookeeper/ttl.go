package zookeeper

import (
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// local is a node created through this store: its TTL deadline on this
// process's monotonic clock, and its fence once known.
type local struct {
	deadline time.Time
	fence    int64
	// owned: the node was granted or taken over (Resume) through this
	// store, so its bounds below are known (zero: none). A hold's deadline
	// is never set past maxUntil; a release before minUntil keeps it
	// (released) until then.
	owned    bool
	minUntil time.Time
	maxUntil time.Time
	released bool
}

// bounds are a hold's MinHold and MaxHold ends on this process's monotonic
// clock (zero: none).
type bounds struct{ min, max time.Time }

// deadFor is how long a node deleted for a lapsed TTL is remembered:
// longer than any operation that read it before the deletion.
const deadFor = time.Minute

// track starts or renews the TTL of a node created through this store. It
// reports false, renewing nothing, for a node deleted for a lapsed TTL.
func (s *Store) track(path string, ttl time.Duration, fence int64) bool {
	_, ok := s.trackHold(path, ttl, fence, nil)
	return ok
}

// trackHold is track for a hold whose bounds b (when not nil) are recorded
// unless the node has bounds already (a repeat keeps the first grant's).
// The deadline is capped at the hold's MaxHold end; a hold past it renews
// nothing (false). It returns the deadline set.
func (s *Store) trackHold(path string, ttl time.Duration, fence int64, b *bounds) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dead := s.dead[path]; dead {
		return time.Time{}, false
	}
	l := s.local[path]
	if l == nil {
		l = &local{}
		s.local[path] = l
	}
	if b != nil && !l.owned {
		l.owned, l.minUntil, l.maxUntil = true, b.min, b.max
	}
	now := time.Now()
	l.deadline = now.Add(ttl)
	if !l.maxUntil.IsZero() && l.deadline.After(l.maxUntil) {
		l.deadline = l.maxUntil
	}
	if fence != 0 {
		l.fence = fence
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return l.deadline, l.deadline.After(now)
}

// owned returns a copy of path's local state when the node was granted or
// taken over through this store (see local), else nil.
func (s *Store) owned(path string) *local {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.local[path]; l != nil && l.owned {
		c := *l
		return &c
	}
	return nil
}

// tracked reports whether this store keeps a deadline for path: every
// node of its session (a hold or a queue place) has one.
func (s *Store) tracked(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local[path] != nil
}

// keepUntil marks the hold at path released, to be deleted by the reaper
// at until (capped at its MaxHold end).
func (s *Store) keepUntil(path string, until time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.local[path]
	if l == nil {
		return false
	}
	if !l.maxUntil.IsZero() && until.After(l.maxUntil) {
		until = l.maxUntil
	}
	l.deadline, l.released = until, true
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return true
}

// released reports whether path is a hold released before its MinHold
// ran out, kept by this store until then.
func (s *Store) released(path string) bool {
	l := s.owned(path)
	return l != nil && l.released
}

// push renews path's TTL to at least ttl from now (a reentrant hold's one
// expiry is pushed out, never in); false as track.
func (s *Store) push(path string, ttl time.Duration) bool {
	s.mu.Lock()
	var deadline time.Time
	l := s.local[path]
	if l != nil {
		deadline = l.deadline
	}
	s.mu.Unlock()
	if l == nil || time.Now().Add(ttl).After(deadline) {
		return s.track(path, ttl, 0)
	}
	return deadline.After(time.Now())
}

func (s *Store) cached(path string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.local[path]; l != nil {
		return l.fence
	}
	return 0
}

func (s *Store) untrack(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.local, path)
}

func (s *Store) remaining(path string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.local[path]; l != nil {
		return max(time.Until(l.deadline), time.Millisecond), true
	}
	return 0, false
}

// lapsed reports whether path is a node of this store whose TTL passed
// without renewal; such a node is deleted at once.
func (s *Store) lapsed(path string) bool {
	s.mu.Lock()
	if _, dead := s.dead[path]; dead {
		s.mu.Unlock()
		return true // its deletion is on its way
	}
	l := s.local[path]
	now := time.Now()
	gone := l != nil && !now.Before(l.deadline)
	if gone && minRunning(l, now) {
		until := l.minUntil
		s.mu.Unlock()
		return !s.endOrKeep(path, until)
	}
	if gone {
		s.lapseLocked(path)
	}
	s.mu.Unlock()
	if gone {
		_ = s.remove(path)
	}
	return gone
}

// minRunning reports whether l is a hold not released through this store
// whose MinHold is still running: at its deadline it may have been
// released through another process (see endOrKeep).
func minRunning(l *local, now time.Time) bool {
	return !l.released && l.minUntil.After(now)
}

// endOrKeep ends the hold at path, whose TTL ran out while its MinHold
// (until) is still running, unless its node's data says it was released
// (through another process, see keepMin): it is then kept until until.
// The delete is conditional on the data read, so a release marked
// meanwhile is seen. It reports whether the hold was kept.
func (s *Store) endOrKeep(path string, until time.Time) bool {
	for range 3 {
		d, st, err := s.readData(path)
		if err != nil {
			break // gone, or the store fails: as any lapsed node
		}
		if d.Released {
			return s.keepUntil(path, until)
		}
		err = s.conn.Delete(path, st.Version)
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			s.mu.Lock()
			s.lapseLocked(path)
			s.mu.Unlock()
			return false
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			break
		}
	}
	s.mu.Lock()
	s.lapseLocked(path)
	s.mu.Unlock()
	_ = s.remove(path)
	return false
}

// orphanRetry is how often the reaper retries the delete of an orphan.
const orphanRetry = 200 * time.Millisecond

// remove deletes a node this store released or let lapse. A delete that
// fails while the client is cut off from the ensemble (the session lives
// on) would leave the node, and with it the lock, held for as long as the
// session lives: the node becomes an orphan, whose delete the reaper
// retries until it succeeds, the node is gone, or the session expires.
func (s *Store) remove(path string) error {
	err := s.conn.Delete(path, -1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil || errors.Is(err, zk.ErrNoNode) || s.closed {
		delete(s.orphans, path)
		return err
	}
	if !s.orphans[path] {
		s.orphans[path] = true
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return err
}

// lapseLocked stops tracking path, whose TTL passed, and remembers it as
// dead; the caller deletes the node. s.mu is held.
func (s *Store) lapseLocked(path string) {
	delete(s.local, path)
	s.dead[path] = time.Now()
}

// reap deletes the nodes of this store whose TTL passed without renewal:
// a TTL is kept to the millisecond while this process lives. When the
// process dies, its session expires and ZooKeeper deletes the nodes. It
// retries the deletes that failed (orphans) every orphanRetry.
func (s *Store) reap() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		next := now.Add(time.Hour)
		var due []string
		check := map[string]time.Time{}
		for p, l := range s.local {
			if !now.Before(l.deadline) && minRunning(l, now) {
				check[p] = l.minUntil
			} else if !now.Before(l.deadline) {
				due = append(due, p)
				s.lapseLocked(p)
			} else if l.deadline.Before(next) {
				next = l.deadline
			}
		}
		var orphans []string
		for p := range s.orphans {
			orphans = append(orphans, p)
		}
		if retry := now.Add(orphanRetry); len(orphans) > 0 && retry.Before(next) {
			next = retry
		}
		for p, at := range s.dead {
			if now.Sub(at) > deadFor {
				delete(s.dead, p)
			} else if at.Add(deadFor).Before(next) {
				next = at.Add(deadFor)
			}
		}
		s.mu.Unlock()
		for _, p := range append(due, orphans...) {
			_ = s.remove(p)
		}
		for p, until := range check {
			s.endOrKeep(p, until)
		}
		select {
		case s.reaped <- struct{}{}:
		default:
		}
		timer.Reset(time.Until(next))
		select {
		case <-s.stop:
			return
		case <-s.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
	}
}
