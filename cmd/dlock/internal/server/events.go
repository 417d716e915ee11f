package server

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server/auth"
	"github.com/dlock-dev/dlock/store"
)

// historySeconds is how much per-second history the dashboard gets when it
// connects.
const historySeconds = 300

// tally is what happened during one second.
type tally struct {
	Acquired int64 `json:"acquired"`
	Locked   int64 `json:"locked"` // contention: refusals and waits that timed out
	Lost     int64 `json:"lost"`
	Released int64 `json:"released"`
	Errors   int64 `json:"errors"`
}

func (t *tally) add(ev eventBody) {
	switch ev.Type {
	case "acquire":
		switch ev.Result {
		case "acquired":
			t.Acquired++
		case "locked":
			t.Locked++
		case "error":
			t.Errors++
		}
	case "release":
		t.Released++
	case "lost":
		t.Lost++
	case "renew":
		if ev.Result == "error" {
			t.Errors++
		}
	}
}

// history keeps per-second tallies of the last n seconds and the totals
// since start, of this replica's events and those other replicas shared
// through the store since it started.
type history struct {
	mu     sync.Mutex
	n      int
	secs   []int64 // unix second of each slot
	slots  []tally
	totals tally
}

func newHistory(n int) *history {
	return &history{n: n, secs: make([]int64, n), slots: make([]tally, n)}
}

func (h *history) observe(ev eventBody) {
	sec := ev.Time / 1000
	h.mu.Lock()
	defer h.mu.Unlock()
	h.totals.add(ev)
	i := int(sec % int64(h.n))
	switch {
	case h.secs[i] < sec:
		h.secs[i], h.slots[i] = sec, tally{}
	case h.secs[i] > sec:
		return // older than the history
	}
	h.slots[i].add(ev)
}

// series returns the tallies of the last n whole seconds, oldest first,
// and the second the last one belongs to.
func (h *history) series(now time.Time) ([]tally, int64) {
	end := now.Unix()
	out := make([]tally, h.n)
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := 0; k < h.n; k++ {
		sec := end - int64(h.n-1-k)
		i := int(sec % int64(h.n))
		if h.secs[i] == sec {
			out[k] = h.slots[i]
		}
	}
	return out, end
}

func (h *history) total() tally {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.totals
}

var eventTypes = [...]string{dlock.EventAcquire: "acquire", dlock.EventRelease: "release", dlock.EventRenew: "renew", dlock.EventLeaseLost: "lost"}

func toEvent(ev dlock.Event, at time.Time) eventBody {
	typ := "other"
	if int(ev.Kind) < len(eventTypes) {
		typ = eventTypes[ev.Kind]
	}
	result := ev.Result
	if ev.Kind == dlock.EventRelease {
		result = "" // the stream's release events carry none (docs/http.md), as those shared by replicas
	}
	return eventBody{Type: typ, Name: ev.Name, Mode: modeName(ev.Mode), Result: result, Fence: ev.Fence,
		DurationMs: ev.Duration.Milliseconds(), Waited: ev.Waited, Time: at.UnixMilli()}
}

// snapshotBody is sent on connect and every SnapshotInterval.
type snapshotBody struct {
	Time      int64       `json:"time"` // unix ms
	Store     string      `json:"store"`
	Inspect   bool        `json:"inspect"` // whether the store can list its locks
	Locks     []stateBody `json:"locks"`
	Truncated bool        `json:"truncated,omitempty"`
	Error     string      `json:"error,omitempty"` // the store failed to list
	Totals    tally       `json:"totals"`
	Held      int         `json:"v1Leases"` // /v1 leases this server tracks
	Replica   string      `json:"replica"`  // this server instance
	// Replicas counts the instances heard from in the last replicaSeen,
	// this one included.
	Replicas int `json:"replicas"`
	// History is the per-second tallies of the last 300 s, oldest first,
	// ending at HistoryEnd (unix s); sent in the first snapshot only.
	History    []tally `json:"history,omitempty"`
	HistoryEnd int64   `json:"historyEnd,omitempty"`
}

// eventBuffer is how many lock events a slow stream client may fall behind
// before further events are dropped (snapshots still correct it).
const eventBuffer = 512

// handleEvents streams lock events and periodic snapshots as server-sent
// events until the client goes away or the server shuts down.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	ch := make(chan *feedEvent, eventBuffer)
	unsub := s.streams.feed.subscribe(ch)
	defer unsub()
	st, ok := s.openStream(w)
	if !ok {
		return
	}
	defer st.close()
	p := auth.FromContext(r.Context()) // a scoped token sees only names in scope
	if !st.send("snapshot", s.snapshot(r.Context(), true)) {
		return
	}
	tick := time.NewTicker(s.cfg.SnapshotInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.life.drain:
			st.send("shutdown", map[string]string{"message": "server shutting down"})
			return
		case ev := <-ch:
			if !p.Allows(ev.name) {
				continue
			}
			if !st.sendData(ev.typ, ev.data) {
				return
			}
		case <-tick.C:
			if s.revoked(p) { // the token left the auth file: end its stream
				return
			}
			if !st.send("snapshot", s.snapshot(r.Context(), false)) {
				return
			}
		}
	}
}

func (s *Server) snapshot(ctx context.Context, first bool) snapshotBody {
	now := time.Now()
	snap := snapshotBody{Time: now.UnixMilli(), Store: s.cfg.StoreName, Totals: s.history.total(), Held: s.leases.len(),
		Replica: s.rep.ID(), Replicas: s.rep.Count(now)}
	if in, ok := s.locker.Store().(store.Inspector); ok {
		snap.Inspect = true
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lb, err := s.listShared(lctx, in)
		cancel()
		if err != nil {
			snap.Error = err.Error()
		}
		snap.Locks, snap.Truncated = lb.Locks, lb.Truncated
	}
	if snap.Locks == nil {
		snap.Locks = []stateBody{}
	}
	if first {
		snap.History, snap.HistoryEnd = s.history.series(now)
	}
	return snap
}

// listShared is list for a snapshot: the store's locks as listed at most
// half a SnapshotInterval ago (a failure too), filtered for the caller's
// principal.
func (s *Server) listShared(ctx context.Context, in store.Inspector) (listBody, error) {
	c := &s.streams.lists
	c.mu.Lock()
	if c.at.IsZero() || time.Since(c.at) >= s.cfg.SnapshotInterval/2 {
		states, err := in.List(ctx)
		if err != nil && ctx.Err() != nil { // this caller's own end: nothing to share
			c.mu.Unlock()
			return listBody{}, err
		}
		c.states, c.err, c.at = states, err, time.Now()
	}
	states, err := c.states, c.err
	c.mu.Unlock()
	if err != nil {
		return listBody{}, err
	}
	return filterList(ctx, states), nil
}

// localEvent is the Metrics subscription: an event of this server's
// Lockers.
func (s *Server) localEvent(ev dlock.Event) {
	if ev.Kind == dlock.EventExtend {
		return // a client's extend: for tracing observers, not the stream
	}
	if ev.Kind == dlock.EventRelease && s.streams.quiet.unsilence(ev.Name, ev.Fence) {
		return
	}
	body := toEvent(ev, time.Now())
	body.Replica = s.rep.ID()
	s.emit(body, true)
}

// emit counts ev in the history, sends it to the event streams and, when
// share is set, to the other replicas.
func (s *Server) emit(ev eventBody, share bool) {
	s.history.observe(ev)
	s.streams.feed.send(ev)
	if share {
		s.rep.Publish(ev.appendJSON(make([]byte, 0, 160)))
	}
}

// remoteEvent is an event another replica published.
func (s *Server) remoteEvent(replica string, raw json.RawMessage) {
	var ev eventBody
	if json.Unmarshal(raw, &ev) == nil {
		ev.Replica = replica
		s.emit(ev, false)
	}
}
