package httpstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/dlock-dev/dlock/store"
)

// maxEventLine bounds one line of the event stream (a snapshot lists every
// lock the server sees).
const maxEventLine = 16 << 20

// Watch implements [store.Store] on the server's event stream (GET
// /v1/events): the channel receives a value when the server reports a
// release or loss of the lock, when a periodic snapshot shows it free, and
// once when the stream ends (the caller's timers take over from there).
//
// All the watches of a Store share one stream, opened by the first and
// closed when the last stops. Watch returns once the server has subscribed
// the stream, so a release after it returns is seen. stop waits for the
// stream to close when it was the last watch on it.
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	if err := checkMode(mode); err != nil {
		return nil, nil, err
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	st := s.stream
	if st == nil || st.isEnded() {
		var err error
		if st, err = s.openStream(ctx); err != nil {
			return nil, nil, err
		}
		s.stream = st
	}
	ch := make(chan struct{}, 1)
	st.add(name, ch)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.watchMu.Lock()
			defer s.watchMu.Unlock()
			if st.remove(name, ch) == 0 {
				st.close()
				if s.stream == st {
					s.stream = nil
				}
			}
		})
	}
	return ch, stop, nil
}

// eventStream is one GET /v1/events stream shared by a Store's watches.
type eventStream struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	watchers map[string]map[chan struct{}]struct{}
	n        int
	ended    bool
}

// openStream connects to the event stream; ctx bounds the connection.
func (s *Store) openStream(ctx context.Context) (*eventStream, error) {
	sctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, s.url("/v1/events"), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", s.ua)
	if s.auth != "" {
		req.Header.Set("Authorization", "Bearer "+s.auth)
	}
	client := *s.hc
	client.Timeout = 0 // the stream lives until its last watch stops
	abort := context.AfterFunc(ctx, cancel)
	resp, err := client.Do(req)
	abort()
	if err != nil {
		cancel()
		return nil, &store.StoreError{Op: "watch", Node: -1, Err: errors.Join(s.redact(err), ctx.Err())}
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, s.statusError("watch", resp.StatusCode, errorReply{})
	}
	st := &eventStream{cancel: cancel, done: make(chan struct{}), watchers: make(map[string]map[chan struct{}]struct{})}
	go func() {
		defer close(st.done)
		defer resp.Body.Close()
		readEvents(resp.Body, st.dispatch)
		// The stream ended (server shutdown, network, close): wake every
		// watcher once so that waiters retry at once; later watches open
		// a new stream.
		st.mu.Lock()
		st.ended = true
		for _, set := range st.watchers {
			for ch := range set {
				notify(ch)
			}
		}
		st.mu.Unlock()
	}()
	return st, nil
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (st *eventStream) isEnded() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ended
}

func (st *eventStream) add(name string, ch chan struct{}) {
	st.mu.Lock()
	defer st.mu.Unlock()
	set := st.watchers[name]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		st.watchers[name] = set
	}
	set[ch] = struct{}{}
	st.n++
	if st.ended { // ended between the check and now: wake at once
		notify(ch)
	}
}

// remove drops a watcher and returns how many are left.
func (st *eventStream) remove(name string, ch chan struct{}) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	if set := st.watchers[name]; set != nil {
		if _, ok := set[ch]; ok {
			delete(set, ch)
			st.n--
		}
		if len(set) == 0 {
			delete(st.watchers, name)
		}
	}
	return st.n
}

// close ends the stream and waits for its reader.
func (st *eventStream) close() {
	st.cancel()
	<-st.done
}

// dispatch wakes the watchers an event concerns.
func (st *eventStream) dispatch(event string, data []byte) {
	switch event {
	case "release", "lost":
		var ev streamEvent
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		st.mu.Lock()
		for ch := range st.watchers[ev.Name] {
			notify(ch)
		}
		st.mu.Unlock()
	case "snapshot":
		var snap streamSnapshot
		if json.Unmarshal(data, &snap) != nil || !snap.Inspect || snap.Truncated || snap.Error != "" {
			return
		}
		held := make(map[string]bool, len(snap.Locks))
		for _, l := range snap.Locks {
			if l.Holders > 0 {
				held[l.Name] = true
			}
		}
		st.mu.Lock()
		for name, set := range st.watchers {
			if !held[name] {
				for ch := range set {
					notify(ch)
				}
			}
		}
		st.mu.Unlock()
	}
}

type streamEvent struct {
	Name string `json:"name"`
}

type streamSnapshot struct {
	Inspect   bool `json:"inspect"`
	Truncated bool `json:"truncated"`
	Error     string
	Locks     []struct {
		Name    string `json:"name"`
		Holders int    `json:"holders"`
	} `json:"locks"`
}

// readEvents reads server-sent events from r until it ends, calling fn
// with each event's type and data.
func readEvents(r io.Reader, fn func(event string, data []byte)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	var event string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0: // end of an event
			if data.Len() > 0 {
				fn(event, data.Bytes())
			}
			event = ""
			data.Reset()
		case bytes.HasPrefix(line, []byte("event:")):
			event = string(bytes.TrimSpace(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(bytes.TrimPrefix(line[len("data:"):], []byte(" ")))
		}
	}
}
