package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// streams are the server-sent event streams open (/v1/events and the
// elections' observe), bounded by Config.MaxEventStreams, the store's list
// of locks their snapshots share, and the feed of events they send.
type streams struct {
	open  atomic.Int64
	lists listCache
	feed  feed     // the events the streams send
	quiet silencer // events not to send
}

// sse is an open server-sent event stream.
type sse struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	slots *atomic.Int64
}

// openStream takes a stream slot and starts a server-sent event stream:
// its headers, 200 and the client's retry delay. With every slot taken it
// answers 503 and returns false. The caller closes the stream.
func (s *Server) openStream(w http.ResponseWriter) (*sse, bool) {
	if n := s.streams.open.Add(1); n > int64(s.cfg.MaxEventStreams) {
		s.streams.open.Add(-1)
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "too many streams",
			fmt.Sprintf("at most %d event streams at once", s.cfg.MaxEventStreams))
		return nil, false
	}
	st := &sse{w: w, rc: http.NewResponseController(w), slots: &s.streams.open}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	st.rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		st.close()
		return nil, false
	}
	st.rc.Flush()
	return st, true
}

// close gives the stream's slot back.
func (st *sse) close() { st.slots.Add(-1) }

// sendData sends one event of JSON data b; false when the client is gone.
func (st *sse) sendData(event string, b []byte) bool {
	st.rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(st.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return false
	}
	return st.rc.Flush() == nil
}

// send sends one event of v as JSON.
func (st *sse) send(event string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	return st.sendData(event, b)
}

// listCache keeps the store's list of locks for the streams' snapshots:
// one List per half SnapshotInterval, however many streams are open,
// instead of one per stream.
type listCache struct {
	mu     sync.Mutex
	at     time.Time
	states []store.State
	err    error
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

// silencer keeps the release events of detached leases from the streams:
// another replica reported them already.
type silencer struct {
	mu sync.Mutex
	m  map[silenceKey]int
}

type silenceKey struct {
	name  string
	fence int64
}

func (q *silencer) silence(name string, fence int64) {
	q.mu.Lock()
	if q.m == nil {
		q.m = make(map[silenceKey]int)
	}
	q.m[silenceKey{name, fence}]++
	q.mu.Unlock()
}

// unsilence reports whether a release of name at fence was silenced, and
// uses it up.
func (q *silencer) unsilence(name string, fence int64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := silenceKey{name, fence}
	n := q.m[k]
	if n == 0 {
		return false
	}
	if n == 1 {
		delete(q.m, k)
	} else {
		q.m[k] = n - 1
	}
	return true
}
