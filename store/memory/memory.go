// Package memory is an in-process [store.Store]: the same semantics as the
// Valkey store without a network. It backs `dlock serve` when no Redis is
// given and serves as a fake in users' unit tests. Locks are local to the
// process; fences stay monotonic across restarts of the process through the
// same hybrid clock floor the Valkey store uses (see [Store]).
package memory

import (
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
)

var (
	_ store.Store         = (*Store)(nil)
	_ store.Inspector     = (*Store)(nil)
	_ store.Pinger        = (*Store)(nil)
	_ store.GrantWatcher  = (*Store)(nil)
	_ store.Elector       = (*Store)(nil)
	_ store.Resumer       = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// Store is an in-memory lock store. The zero value is not usable; call New.
// It supports every [store.Mode]. Expired holds and queue entries are
// dropped lazily, on the next operation on their lock; a fair lock whose
// holder expired is handed to its head waiter then.
//
// A name is one lock (see [store.Coexist]): each pattern keeps its own
// state (holders, queue), and a request is refused while another pattern
// holds the name. The patterns share the name's last fence. When a name
// frees, the waiters of every pattern are woken and a fair lock's queue is
// served first.
//
// Every hold keeps its record with it (store.Request's Holder and Data,
// the grant's time as Since, always) and the ends of its MinHold and
// MaxHold by the process's clock; a queued fair waiter's record is kept
// with its place and given to the hold it is handed. Store also
// implements [store.Resumer] and [store.ForceReleaser].
type Store struct {
	retention time.Duration // see WithFenceRetention
	mu        sync.Mutex
	locks     map[key]*lock
	fences    map[string]int64
	mark      int64 // the highest fence issued or raised, every name
	issued    int   // fences issued since the last prune
	proposed  int64 // the fence floor the Acquire being served proposes, or 0
	watchers  map[key]map[chan struct{}]struct{}
	grants    map[grantKey]chan store.Grant
}

// key names the state of one pattern of one lock name. ModeWrite shares
// the state of ModeRead.
type key struct {
	mode store.Mode
	name string
}

type grantKey struct {
	name, token string
}

func keyOf(name string, m store.Mode) key {
	if m == store.ModeWrite {
		m = store.ModeRead
	}
	return key{mode: m, name: name}
}

type holder struct {
	token   string
	expires time.Time
	fence   int64
	write   bool   // read-write lock: the writer
	value   string // election: the leader's value
	record         // who holds, since when, and the hold's bounds
	// unclaimed is, for a fair lock handed to its queued head, the MinHold
	// to count again from the Acquire by which the waiter learns of it.
	unclaimed time.Duration
}

// record is what a grant keeps with a hold besides its token: the
// request's Holder and Data, the grant's time, and the instants its
// MinHold and MaxHold end (zero for none). A re-entry copies its hold's.
type record struct {
	owner    string
	data     string
	since    time.Time
	minUntil time.Time // a Release before it leaves the hold until it
	maxUntil time.Time // no grant or Extend reaches past it
}

// waiter is a queue entry: a fair-lock ticket or a writer's intent.
type waiter struct {
	token   string
	ticket  int64
	expires time.Time
	ttl     time.Duration // lease length to grant on handoff
	// The record fields of the request that queued, for a handoff.
	holder, data     string
	minHold, maxHold time.Duration
}

type lock struct {
	mode    store.Mode // the key's mode
	holders []*holder  // reentrant: one per acquisition of the owner
	owner   string     // reentrant
	queue   []*waiter  // by ticket
	ticket  int64      // last ticket issued
	limit   int        // semaphore
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{
		retention: DefaultFenceRetention,
		locks:     make(map[key]*lock),
		fences:    make(map[string]int64),
		watchers:  make(map[key]map[chan struct{}]struct{}),
		grants:    make(map[grantKey]chan store.Grant),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// An Option configures a [Store] made by [New].
type Option func(*Store)

// DefaultFenceRetention is [WithFenceRetention]'s default: 61 s, as the
// Valkey store's.
const DefaultFenceRetention = time.Minute + time.Second

// WithFenceRetention sets how long a lock name's last fence is kept once
// the name has no holder; default 61 s. A name keeps one map entry while
// held and for about this long after, so a workload that locks many
// distinct names keeps entries for the names of the last retention only.
// Fences stay monotonic whatever the retention: a name without an entry
// is issued max(the store's highest fence + 1, the clock floor). The
// entry is what a reader joining readers and [Store.State] report. A value
// under a second counts as a second.
func WithFenceRetention(d time.Duration) Option {
	return func(s *Store) { s.retention = max(d, time.Second) }
}

// nextFence issues the fence after last: max(last+1, wall-clock µs floor), so
// that a restarted process still issues fences above earlier ones.
func nextFence(last int64, now time.Time) int64 {
	return max(last+1, now.UnixMilli()*1000)
}

// issue records and returns the next fence of name: above its last fence,
// or, once that is forgotten, above every fence the store issued (the
// mark), and at least the clock floor; or the floor the Acquire being
// served proposed (s.proposed, see store.WithFenceFloor), when it is above
// that by at most 100 ms of the clock floor. Caller holds s.mu.
func (s *Store) issue(name string, now time.Time) int64 {
	last, ok := s.fences[name]
	if !ok {
		last = s.mark
	}
	f := nextFence(last, now)
	if p := s.proposed; p > f && p <= now.UnixMilli()*1000+store.MaxFloorLead {
		f = p
	}
	s.fences[name] = f
	s.mark = max(s.mark, f)
	if s.issued++; s.issued >= max(1024, len(s.fences)) {
		s.pruneFences(now)
	}
	return f
}

// pruneFences forgets the last fences of names that no pattern holds and
// whose last fence is below the clock floor of the retention ago
// (WithFenceRetention), so that unique lock names do not pile up. The mark
// is above them, so forgetting them cannot make a fence go down. Caller
// holds s.mu.
func (s *Store) pruneFences(now time.Time) {
	s.issued = 0
	floor := now.Add(-s.retention).UnixMilli() * 1000
	for name, f := range s.fences {
		if f < floor && !s.heldAny(name) {
			delete(s.fences, name)
		}
	}
}

// heldAny reports whether some pattern's state of name has holders, live
// or not yet dropped. Caller holds s.mu.
func (s *Store) heldAny(name string) bool {
	for _, m := range []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeFair, store.ModeSemaphore, store.ModeElection} {
		if lk := s.locks[key{mode: m, name: name}]; lk != nil && len(lk.holders) > 0 {
			return true
		}
	}
	return false
}
