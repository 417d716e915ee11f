package redlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock"
)

// The Store keeps two small records per token, both keyed by lock name and
// token: flights (nodes still working on an operation that has returned)
// and holds (which nodes settled a grant's fence).

type holdKey struct{ name, token string }

// flight tracks the nodes still working on an Acquire or Release of one
// token after it returned: done[i] closes when node i answered (nil for
// nodes that had). Every later operation of the token waits for it on each
// such node, so that operations of one token reach each node in the order
// they were made: a Release cannot overtake a late acquire and leave the
// token holding that node, and a late release cannot delete the hold of an
// Acquire made after it.
type flight struct {
	done []chan struct{}
}

// wait waits until node i has answered the flight's operation (at once for
// a nil flight).
func (fl *flight) wait(ctx context.Context, i int) error {
	if fl == nil || fl.done[i] == nil {
		return nil
	}
	select {
	case <-fl.done[i]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hold remembers the fence of a grant until the token is released or its
// TTL has passed, so that a repeated Acquire by the holder can return the
// same fence (see settleNodes).
type hold struct {
	fence   int64
	expires time.Time
}

// minSweep is the size of the holds map below which expired entries are
// not swept.
const minSweep = 1024

// track records which nodes are still working on an operation of req's
// token that has returned (flags[i] set), until they answer on ch, so that
// a later Release of the token waits for them node by node (see flight).
func track[T any](s *Store, req dlock.Request, flags []bool, ch <-chan result[T], left int) {
	if left == 0 {
		return
	}
	k := holdKey{req.Name, req.Token}
	fl := &flight{done: make([]chan struct{}, len(flags))}
	for i, f := range flags {
		if f {
			fl.done[i] = make(chan struct{})
		}
	}
	s.fmu.Lock()
	s.flights[k] = fl
	s.fmu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for range left {
			r := <-ch
			close(fl.done[r.node])
		}
		s.fmu.Lock()
		if s.flights[k] == fl {
			delete(s.flights, k)
		}
		s.fmu.Unlock()
	}()
}

// flightOf returns the flight of req's token, or nil.
func (s *Store) flightOf(req dlock.Request) *flight {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.flights[holdKey{req.Name, req.Token}]
}

// remember records the fence of req's grant.
func (s *Store) remember(req dlock.Request, fence int64) {
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
	s.holds[holdKey{req.Name, req.Token}] = &hold{fence: fence, expires: now.Add(req.TTL)}
}

// prevFence returns the fence of req's token's current grant, or 0.
func (s *Store) prevFence(req dlock.Request) int64 {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	h := s.holds[holdKey{req.Name, req.Token}]
	if h == nil || time.Now().After(h.expires) {
		return 0
	}
	return h.fence
}

// extended pushes back the expiry of the record of req's grant.
func (s *Store) extended(req dlock.Request) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if h := s.holds[holdKey{req.Name, req.Token}]; h != nil {
		h.expires = time.Now().Add(req.TTL)
	}
}

// forget drops the record of req's grant.
func (s *Store) forget(req dlock.Request) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	delete(s.holds, holdKey{req.Name, req.Token})
}
