package postgres

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"

	"github.com/dlock-dev/dlock/store"
)

var _ store.Broadcaster = (*Store)(nil)

// busChannel is the NOTIFY channel of [Store.Publish]. A payload is
// "<topic>\n<base64 of the message>" (a topic, like a lock name, has no
// control characters; NOTIFY payloads are text of under 8000 bytes).
const busChannel = "dlock_bus"

// maxMessage is the largest message Publish takes: its payload stays
// under NOTIFY's 8000 bytes with the longest topic.
const maxMessage = 5600

// Publish implements [store.Broadcaster] with NOTIFY on channel
// "dlock_bus": every Store listening on the database hears it, this one
// included. A message is at most 5600 bytes; NOTIFY delivers it when the
// publishing transaction (here, the statement) commits.
func (s *Store) Publish(ctx context.Context, topic string, msg []byte) error {
	if err := store.ValidName(topic); err != nil {
		return err
	}
	if len(msg) > maxMessage {
		return &store.InvalidError{Field: "msg", Reason: "must be at most 5600 bytes"}
	}
	payload := topic + "\n" + base64.StdEncoding.EncodeToString(msg)
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", busChannel, payload); err != nil {
		return storeErr("publish", err)
	}
	return nil
}

// Subscribe implements [store.Broadcaster] on the Store's listening
// session (the one that hears releases for Watch); it returns once the
// session listens or ctx ends (the session keeps connecting). Messages
// sent while the session reconnects are lost.
func (s *Store) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	if err := store.ValidName(topic); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, &store.InvalidError{Field: "fn", Reason: "must not be nil"}
	}
	h := s.hub
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, storeErr("subscribe", errors.New("store closed"))
	}
	ln := h.listenLocked()
	h.busMu.Lock()
	if h.busSubs == nil {
		h.busSubs = make(map[string]map[int]func([]byte))
	}
	if h.busSubs[topic] == nil {
		h.busSubs[topic] = make(map[int]func([]byte))
	}
	id := h.busNext
	h.busNext++
	h.busSubs[topic][id] = fn
	h.busMu.Unlock()
	h.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.busMu.Lock()
			defer h.busMu.Unlock()
			delete(h.busSubs[topic], id)
			if len(h.busSubs[topic]) == 0 {
				delete(h.busSubs, topic)
			}
		})
	}
	select {
	case <-ln.ready:
	case <-ctx.Done():
	case <-ln.done:
		stop()
		return nil, storeErr("subscribe", errors.New("store closed"))
	}
	return stop, nil
}

// deliver passes a bus payload to its topic's subscribers.
func (h *hub) deliver(payload string) {
	topic, enc, ok := strings.Cut(payload, "\n")
	if !ok {
		return
	}
	msg, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return
	}
	h.busMu.Lock()
	defer h.busMu.Unlock()
	for _, fn := range h.busSubs[topic] {
		fn(msg)
	}
}
