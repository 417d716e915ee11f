package redlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// The Store keeps two small records: per lock name, the flights of its
// operations (nodes still working on an operation that has returned), and
// per token, the fence of its grant (holds).

type holdKey struct{ name, token string }

// flight tracks the nodes still working on an Acquire, Extend or Release
// after it returned: done[i] closes when node i answered (nil for nodes that had).
// Every later operation on the same lock name waits for it on each such
// node, so that the operations this Store makes on one lock reach each node
// in the order they were made: a Release cannot overtake a late acquire and
// leave the token holding that node, a late release cannot delete the hold
// of an Acquire made after it, and a lock released through this Store is
// free on every node for its next Acquire.
type flight struct {
	done []chan struct{}
}

// flights are the flights of one lock name.
type flights []*flight

// waitAtMost waits until node i has answered the operations of fls, or d
// has passed (false).
func (fls flights) waitAtMost(i int, d time.Duration) bool {
	var t *time.Timer
	for _, fl := range fls {
		if fl.done[i] == nil {
			continue
		}
		select {
		case <-fl.done[i]:
			continue
		default:
		}
		if t == nil {
			t = time.NewTimer(d)
			defer t.Stop()
		}
		select {
		case <-fl.done[i]:
		case <-t.C:
			return false
		}
	}
	return true
}

// wait waits until node i has answered the operations of fls.
func (fls flights) wait(ctx context.Context, i int) error {
	for _, fl := range fls {
		if fl.done[i] == nil {
			continue
		}
		select {
		case <-fl.done[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// hold remembers the fence of a grant (and an election's value) until the
// token is released or its TTL has passed, so that a repeated Acquire by
// the holder can return the same fence (see settleNodes) and keep the
// first value.
type hold struct {
	fence   int64
	value   string
	expires time.Time
	end     time.Time // the grant's MaxHold runs out (zero: none)
}

// minSweep is the size of the holds map below which expired entries are
// not swept.
const minSweep = 1024

// track records that the operation on names has returned while the
// nodes flagged in late (those whose answer it did not read) may still be
// working on it, until they answer (see flight). A node whose answer is
// on ch, unread, is done.
func (f *fanout[T]) track(names []string, late []bool) {
	if f.stop != nil {
		f.stop()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.ch) > 0 {
		late[(<-f.ch).node] = false
	}
	var fl *flight
	for i, l := range late {
		if !l {
			continue
		}
		if fl == nil {
			fl = &flight{done: make([]chan struct{}, len(late))}
		}
		fl.done[i] = make(chan struct{})
		f.left++
	}
	if fl == nil {
		return
	}
	f.fl, f.names = fl, names
	s := f.s
	s.fmu.Lock()
	for _, name := range names {
		s.flights[name] = append(s.flights[name], fl)
	}
	s.fmu.Unlock()
}

// land removes fl, whose nodes all answered, from the flights of names.
func (s *Store) land(fl *flight, names []string) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for _, name := range names {
		fls := s.flights[name]
		for i, f := range fls {
			if f == fl {
				fls = append(fls[:i:i], fls[i+1:]...)
				break
			}
		}
		if len(fls) == 0 {
			delete(s.flights, name)
		} else {
			s.flights[name] = fls
		}
	}
}

// flightsOf returns the flights of lock name.
func (s *Store) flightsOf(name string) flights {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.flights[name]
}

// remember records the fence of req's grant, and value, an election's.
func (s *Store) remember(req store.Request, fence int64, value string) {
	now := time.Now()
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if len(s.holds) >= s.sweepAt {
		for k, h := range s.holds {
			if now.After(h.expires) {
				delete(s.holds, k)
			}
		}
		s.sweepAt = max(minSweep, 2*len(s.holds))
	}
	h := &hold{fence: fence, value: value, expires: now.Add(holdTTL(req))}
	if req.MaxHold > 0 {
		h.end = now.Add(req.MaxHold)
	}
	s.holds[holdKey{req.Name, req.Token}] = h
}

// prevHold returns the fence and value of req's token's current grant, or
// 0 and "".
func (s *Store) prevHold(req store.Request) (int64, string) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	h := s.holds[holdKey{req.Name, req.Token}]
	if h == nil || time.Now().After(h.expires) {
		return 0, ""
	}
	return h.fence, h.value
}

// extended pushes back the expiry of the record of req's grant.
func (s *Store) extended(req store.Request) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if h := s.holds[holdKey{req.Name, req.Token}]; h != nil {
		h.expires = time.Now().Add(req.TTL)
		if !h.end.IsZero() && h.end.Before(h.expires) {
			h.expires = h.end
		}
	}
}

// forgetName drops the records of every grant of name.
func (s *Store) forgetName(name string) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for k := range s.holds {
		if k.name == name {
			delete(s.holds, k)
		}
	}
}

// forget drops the record of req's grant.
func (s *Store) forget(req store.Request) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	delete(s.holds, holdKey{req.Name, req.Token})
}
