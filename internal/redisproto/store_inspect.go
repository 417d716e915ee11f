package redisproto

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/dlock-dev/dlock/store"
)

// State implements [store.Inspector]: one round trip for the mutex, two for
// the other patterns.
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	if err := s.l.CheckName(name); err != nil {
		return store.State{}, err
	}
	v, err := s.eval(ctx, StateScript, s.l.StateKeys(name), nil).Values()
	if err != nil {
		return store.State{}, s.fail("state", err)
	}
	st := store.State{Name: name}
	if len(v) < 4 {
		return st, nil
	}
	var ints [4]int64 // holders, pttl, fence, waiters
	for i := range ints {
		if i+1 < len(v) {
			ints[i], _ = v[i+1].Int64()
		}
	}
	st, pattern := DecodeState(st, v[0].Str(), ints[0], ints[1], ints[2], ints[3])
	if !pattern {
		owners, err := DecodeOwners(v[min(5, len(v)):])
		if err != nil {
			return store.State{}, fmt.Errorf("dlock: %s state: %w", s.name, err)
		}
		return withOwners(st, owners), nil
	}
	p, err := s.eval(ctx, PatternStateScript, s.l.PatternStateKeys(name), nil).Values()
	if err != nil {
		return store.State{}, s.fail("state", err)
	}
	st, err = DecodePatternState(st, p)
	if err != nil {
		return store.State{}, fmt.Errorf("dlock: %s state: %w", s.name, err)
	}
	return st, nil
}

// withOwners sets st.Owners: owners, then unknown owners up to st.Holders
// (the holders of a key no script of dlock wrote, a foreign hash or set).
func withOwners(st store.State, owners []store.Holder) store.State {
	if len(owners) > st.Holders {
		owners = owners[:st.Holders]
	}
	for len(owners) < st.Holders {
		owners = append(owners, store.Holder{})
	}
	if st.Holders > 0 {
		st.Owners = owners
	}
	return st
}

// List implements [store.Inspector]: it SCANs every primary for main keys
// and for the keys of the other patterns, then reads the State of each
// name found. With an empty key prefix every key of the database is a
// would-be main key: List then skips dlock's auxiliary keys ("{tag}:...")
// and keys without an expiry, which no lock is (a lock always has a TTL).
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	seen := make(map[string]bool)
	var names []string
	bare := s.l.Prefix == ""
	for _, match := range []string{s.l.ListPattern(), AuxPattern} {
		err := s.c.Scan(ctx, match, func(k string) {
			name, ok := s.l.MainName(k)
			if ok && bare && auxKey(k) {
				ok = false
			}
			if !ok {
				name, ok = s.l.PatternName(k)
			}
			if ok && !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		})
		if err != nil {
			return nil, s.fail("list", err)
		}
	}
	sort.Strings(names)
	out := make([]store.State, 0, len(names))
	for _, name := range names {
		st, err := s.State(ctx, name)
		if err != nil {
			return nil, err
		}
		if bare && st.TTL <= 0 && st.Queue == 0 {
			continue // not a lock: no expiry
		}
		if st.Holders > 0 || st.Queue > 0 {
			out = append(out, st)
		}
	}
	return out, nil
}

// auxKey reports whether k has the shape of an auxiliary key: a hash tag
// followed by ":" ("{lock:x}:fence").
func auxKey(k string) bool {
	if !strings.HasPrefix(k, "{") {
		return false
	}
	i := strings.IndexByte(k, '}')
	return i > 0 && strings.HasPrefix(k[i+1:], ":")
}

// Leader implements [store.Elector] in one round trip.
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	if err := s.l.CheckName(name); err != nil {
		return store.Leader{}, err
	}
	v, err := s.eval(ctx, LeaderScript, s.l.LeaderKeys(name), nil).Strings()
	if err != nil {
		return store.Leader{}, s.fail("leader", err)
	}
	return DecodeLeader(v)
}
