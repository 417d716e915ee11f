package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
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
