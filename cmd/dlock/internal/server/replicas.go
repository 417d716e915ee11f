package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// Replicas. Any number of servers on one store act as one service: a /v1
// lease lives on the store and any instance extends or releases it by its
// token (leases.go asks the store when the local Lease is unknown or
// ended), and waits are woken by the store. What each instance keeps
// locally is a cache: the Leases it granted, for their metrics and events.
//
// Lock events are shared through the store when it is a
// [store.Broadcaster]: each instance tags its events with a random replica
// ID and publishes them in batches on the topic "events"; every instance
// streams and counts the events of the others next to its own, and skips
// its own when they come back. A batch also names the leases an instance
// extended or released for a client ("drop": the first 128 bits of
// SHA-256 of name and token, which gives nothing to whoever reads the
// channel, and anyone who can read it can read the lock keys anyway), so
// that the instance that granted such a lease stops tracking it quietly
// instead of counting it lost when its own count of the lease runs out.

// busTopic is the Broadcaster topic of lock events.
const busTopic = "events"

const (
	// publishDelay is how long events wait to be published together.
	publishDelay = 50 * time.Millisecond
	// publishBytes is the batch size that is published at once.
	publishBytes = store.MaxBroadcast - 600
	// replicaHeartbeat is how often an idle instance says it is there.
	replicaHeartbeat = 5 * time.Second
	// replicaSeen is how long an instance counts in the snapshot's
	// replicas after it was last heard from.
	replicaSeen = 3 * replicaHeartbeat
	// pubQueue bounds the events waiting to be published; beyond it they
	// are dropped (the other instances' snapshots still show the locks).
	pubQueue = 4096
)

// busMsg is what an instance publishes.
type busMsg struct {
	Replica string            `json:"replica"`
	Events  []json.RawMessage `json:"events,omitempty"`
	Drop    []string          `json:"drop,omitempty"`
}

// pubItem is an event or a drop waiting to be published.
type pubItem struct {
	event json.RawMessage
	drop  string
}

type replicaState struct {
	id   string
	self []byte            // how this instance's batches start
	bus  store.Broadcaster // nil when the store cannot broadcast
	feed feed

	pub    chan pubItem
	quit   chan struct{}
	done   chan struct{} // closed when the publisher ended
	unsub  func()        // of the bus
	closed sync.Once

	mu       sync.Mutex
	seen     map[string]time.Time // other replicas, when last heard
	ids      map[string]leaseKey  // lease ID → key, of the leases granted here
	idsSweep int
	silenced map[silenceKey]int // release events of detached leases, not to report
}

type silenceKey struct {
	name  string
	fence int64
}

// startReplicas gives the server its replica ID and, on a store that can
// broadcast, shares its events through it.
func (s *Server) startReplicas() {
	r := &s.rep
	var b [8]byte
	rand.Read(b[:])
	r.id = hex.EncodeToString(b[:])
	r.self = (&busMsg{Replica: r.id}).appendJSON(nil)
	r.self = r.self[:len(r.self)-1] // {"replica":"ID"
	r.seen = make(map[string]time.Time)
	r.ids = make(map[string]leaseKey)
	r.silenced = make(map[silenceKey]int)
	r.bus, _ = s.locker.Store().(store.Broadcaster)
	if r.bus == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	unsub, err := r.bus.Subscribe(ctx, busTopic, s.remote)
	cancel()
	if err != nil {
		if !errors.Is(err, dlock.ErrNotSupported) {
			s.log.Warn("dlock: server: cannot hear other replicas' events", "err", err)
		}
		r.bus = nil
		return
	}
	r.unsub = unsub
	r.pub = make(chan pubItem, pubQueue)
	r.quit = make(chan struct{})
	r.done = make(chan struct{})
	go s.publishLoop()
}

// stopReplicas ends the subscription and the publisher, waiting for both.
func (s *Server) stopReplicas() {
	r := &s.rep
	if r.bus == nil {
		return
	}
	r.closed.Do(func() {
		r.unsub()
		close(r.quit)
		<-r.done
	})
}

// localEvent is the Metrics subscription: an event of this server's
// Lockers.
func (s *Server) localEvent(ev dlock.Event) {
	if ev.Kind == dlock.EventExtend {
		return // a client's extend: for tracing observers, not the stream
	}
	if ev.Kind == dlock.EventRelease && s.rep.unsilence(ev.Name, ev.Fence) {
		return
	}
	body := toEvent(ev, time.Now())
	body.Replica = s.rep.id
	s.emit(body, true)
}

// emit counts ev in the history, sends it to the event streams and, when
// share is set, to the other replicas.
func (s *Server) emit(ev eventBody, share bool) {
	s.history.observe(ev)
	s.rep.feed.send(ev)
	if share && s.rep.bus != nil {
		s.rep.queue(pubItem{event: ev.appendJSON(make([]byte, 0, 160))})
	}
}

// servedElsewhere reports that this server extended or released the lease
// of token on name through the store: the instance that granted it stops
// tracking it. A release is also reported as an event.
func (s *Server) servedElsewhere(name, token string, mode dlock.Mode, released bool) {
	if released {
		s.emit(eventBody{Type: "release", Name: name, Mode: modeName(mode), Time: time.Now().UnixMilli(), Replica: s.rep.id}, true)
	}
	if s.rep.bus != nil {
		s.rep.queue(pubItem{drop: leaseID(name, token)})
	}
}

func (r *replicaState) queue(it pubItem) {
	select {
	case r.pub <- it:
	default:
	}
}

// leaseID names a lease on the bus without revealing its token.
func leaseID(name, token string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + token))
	return hex.EncodeToString(sum[:16])
}

// noteLease records that the /v1 lease of key was granted here.
func (s *Server) noteLease(key leaseKey) {
	r := &s.rep
	if r.bus == nil {
		return
	}
	id := leaseID(key.name, key.token)
	r.mu.Lock()
	r.ids[id] = key
	sweep := len(r.ids) >= max(2*r.idsSweep, 64)
	if sweep {
		r.idsSweep = len(r.ids)
	}
	r.mu.Unlock()
	if sweep {
		// Forget the leases no longer in the table; outside r.mu, since
		// the table's lock is taken.
		var gone []string
		r.mu.Lock()
		keys := make(map[string]leaseKey, len(r.ids))
		for id, k := range r.ids {
			keys[id] = k
		}
		r.mu.Unlock()
		for id, k := range keys {
			if s.leases.lookup(k) == nil {
				gone = append(gone, id)
			}
		}
		r.mu.Lock()
		for _, id := range gone {
			delete(r.ids, id)
		}
		r.idsSweep = len(r.ids)
		r.mu.Unlock()
	}
}

// detach stops tracking the lease of id, which a client extended or
// released through another replica: the local Lease is forgotten, without
// touching the store and without an event.
func (s *Server) detach(id string) {
	r := &s.rep
	r.mu.Lock()
	key, ok := r.ids[id]
	delete(r.ids, id)
	r.mu.Unlock()
	if !ok {
		return
	}
	e := s.leases.lookup(key)
	if e == nil || !e.mu.TryLock() {
		return // busy with a request of its client: that one decides
	}
	defer e.mu.Unlock()
	if ls := e.lease; ls != nil && !ended(ls) {
		r.silence(key.name, ls.Fence())
		if ls.Forget() != nil {
			r.unsilence(key.name, ls.Fence())
		}
	}
	s.leases.remove(key, e)
}

func (r *replicaState) silence(name string, fence int64) {
	r.mu.Lock()
	r.silenced[silenceKey{name, fence}]++
	r.mu.Unlock()
}

// unsilence reports whether a release of name at fence was silenced, and
// uses it up.
func (r *replicaState) unsilence(name string, fence int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := silenceKey{name, fence}
	n := r.silenced[k]
	if n == 0 {
		return false
	}
	if n == 1 {
		delete(r.silenced, k)
	} else {
		r.silenced[k] = n - 1
	}
	return true
}

// remote handles a message of the bus. It runs on the store's delivery
// goroutine, so it never blocks.
func (s *Server) remote(msg []byte) {
	// This instance's own batches come back too: skip them undecoded (its
	// batches start with its ID, see busMsg.appendJSON).
	if bytes.HasPrefix(msg, s.rep.self) {
		return
	}
	var m busMsg
	if json.Unmarshal(msg, &m) != nil || m.Replica == "" || m.Replica == s.rep.id {
		return
	}
	s.rep.mu.Lock()
	s.rep.seen[m.Replica] = time.Now()
	s.rep.mu.Unlock()
	for _, raw := range m.Events {
		var ev eventBody
		if json.Unmarshal(raw, &ev) == nil {
			ev.Replica = m.Replica
			s.emit(ev, false)
		}
	}
	for _, id := range m.Drop {
		s.detach(id)
	}
}

// count returns how many replicas were heard from lately, this one
// included.
func (r *replicaState) count(now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 1
	for id, at := range r.seen {
		if now.Sub(at) > replicaSeen {
			delete(r.seen, id)
			continue
		}
		n++
	}
	return n
}

// publishLoop publishes queued events and drops in batches, and a
// heartbeat when idle, until stopReplicas.
func (s *Server) publishLoop() {
	r := &s.rep
	defer close(r.done)
	m := busMsg{Replica: r.id}
	size := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	beat := time.NewTicker(replicaHeartbeat)
	defer beat.Stop()
	sent := time.Now()
	flush := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := r.bus.Publish(ctx, busTopic, m.appendJSON(make([]byte, 0, size+64))); err != nil {
			s.log.Debug("dlock: server: sharing events failed", "err", err)
		}
		cancel()
		m.Events, m.Drop, size = nil, nil, 0
		if armed {
			timer.Stop()
			armed = false
		}
		sent = time.Now()
	}
	for {
		select {
		case <-r.quit:
			return
		case it := <-r.pub:
			if it.event != nil {
				m.Events = append(m.Events, it.event)
				size += len(it.event) + 1
			} else {
				m.Drop = append(m.Drop, it.drop)
				size += len(it.drop) + 3
			}
			if size >= publishBytes {
				flush()
			} else if !armed {
				timer.Reset(publishDelay)
				armed = true
			}
		case <-timer.C:
			armed = false
			flush()
		case now := <-beat.C:
			if size == 0 && now.Sub(sent) >= replicaHeartbeat/2 {
				flush()
			}
		}
	}
}

// feed passes events to the open event streams.
type feed struct {
	mu   sync.Mutex
	next int
	subs map[int]chan<- *feedEvent
}

// feedEvent is one event as every stream sends it: encoded once, shared
// by the streams (a stream's buffer holds pointers, not copies).
type feedEvent struct {
	typ, name string
	data      []byte // the event's JSON
}

func (f *feed) subscribe(ch chan<- *feedEvent) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = make(map[int]chan<- *feedEvent)
	}
	id := f.next
	f.next++
	f.subs[id] = ch
	return func() {
		f.mu.Lock()
		delete(f.subs, id)
		f.mu.Unlock()
	}
}

// send passes ev to every stream that keeps up; a slow one misses it.
func (f *feed) send(ev eventBody) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.subs) == 0 {
		return
	}
	fe := &feedEvent{typ: ev.Type, name: ev.Name, data: ev.appendJSON(nil)}
	for _, ch := range f.subs {
		select {
		case ch <- fe:
		default:
		}
	}
}

// byToken runs op, an extend or release of req (name and token) on the
// store, in the lease's mode: req.Mode when known (the body named it, or
// this server granted the lease); else the mutex first and, when the mutex
// is not held by the token, the mode holding the name and then the queue
// places (fair, write) when it has waiters. A token holds a name in one
// mode only, so asking in another mode changes nothing. A semaphore
// request carries the name's limit, read from its state. It returns the
// mode that worked.
func (s *Server) byToken(ctx context.Context, req dlock.Request, known bool, op func(dlock.Request) error) (dlock.Mode, error) {
	in, inspect := s.locker.Store().(store.Inspector)
	var st store.State
	var stateErr error
	stated := false
	state := func() (store.State, error) {
		if !stated && inspect {
			st, stateErr = in.State(ctx, req.Name)
			stated = true
		}
		return st, stateErr
	}
	run := func(m dlock.Mode) error {
		r := req
		r.Mode = m
		if m == dlock.ModeSemaphore {
			if st, err := state(); err == nil && st.Limit > 0 {
				r.Limit = st.Limit
			}
		}
		return op(r)
	}
	if known {
		return req.Mode, run(req.Mode)
	}
	err := run(dlock.ModeMutex)
	if !errors.Is(err, dlock.ErrNotHeld) || !inspect {
		return dlock.ModeMutex, err
	}
	st, serr := state()
	if serr != nil {
		return dlock.ModeMutex, err
	}
	tried := map[dlock.Mode]bool{dlock.ModeMutex: true}
	var try []dlock.Mode
	if st.Holders > 0 {
		try = append(try, st.Mode)
	}
	if st.Queue > 0 {
		try = append(try, dlock.ModeFair, dlock.ModeWrite)
	}
	for _, m := range try {
		if tried[m] {
			continue
		}
		tried[m] = true
		if err = run(m); !errors.Is(err, dlock.ErrNotHeld) {
			return m, err
		}
	}
	return dlock.ModeMutex, err
}
