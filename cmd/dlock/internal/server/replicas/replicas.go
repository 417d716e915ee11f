// Package replicas makes the instances of the lock service on one store
// act as one. A /v1 lease lives on the store and any instance extends or
// releases it by its token; what each instance keeps locally is a cache:
// the Leases it granted, for their metrics and events.
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
package replicas

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// busTopic is the Broadcaster topic of lock events.
const busTopic = "events"

const (
	// publishDelay is how long events wait to be published together.
	publishDelay = 50 * time.Millisecond
	// publishBytes is the batch size that is published at once.
	publishBytes = store.MaxBroadcast - 600
	// heartbeat is how often an idle instance says it is there.
	heartbeat = 5 * time.Second
	// seenFor is how long an instance counts in Count after it was last
	// heard from.
	seenFor = 3 * heartbeat
	// pubQueue bounds the events waiting to be published; beyond it they
	// are dropped (the other instances' snapshots still show the locks).
	pubQueue = 4096
)

// Hooks are what the instance does with what the others say. They run on
// the store's delivery goroutine (Event, Served) or in Granted's caller
// (Held), and must not block.
type Hooks struct {
	// Event gets another instance's event, as the JSON it published.
	Event func(replica string, event json.RawMessage)
	// Served gets a lease granted here (Granted) that a client extended
	// or released through another instance.
	Served func(name, token string)
	// Held reports whether a lease granted here is still tracked.
	Held func(name, token string) bool
}

// Bus is this instance's link to the others. Its methods are safe for
// concurrent use; on a store that cannot broadcast it only names the
// instance.
type Bus struct {
	id    string
	self  []byte            // how this instance's batches start
	bus   store.Broadcaster // nil when the store cannot broadcast
	hooks Hooks
	log   *slog.Logger

	pub    chan item
	quit   chan struct{}
	done   chan struct{} // closed when the publisher ended
	unsub  func()        // of the bus
	closed sync.Once

	mu       sync.Mutex
	seen     map[string]time.Time // other replicas, when last heard
	ids      map[string]lease     // lease ID → lease, of the leases granted here
	idsSweep int
}

// lease is a /v1 lease granted here.
type lease struct{ name, token string }

// item is an event or a drop waiting to be published.
type item struct {
	event json.RawMessage
	drop  string
}

// Start gives the instance its replica ID and, on a store that can
// broadcast, shares its events through it until Stop.
func Start(st store.Store, log *slog.Logger, hooks Hooks) *Bus {
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	b := &Bus{id: hex.EncodeToString(raw[:]), hooks: hooks, log: log,
		seen: make(map[string]time.Time), ids: make(map[string]lease)}
	b.self = (&message{Replica: b.id}).appendJSON(nil)
	b.self = b.self[:len(b.self)-1] // {"replica":"ID"
	bus, _ := st.(store.Broadcaster)
	if bus == nil {
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	unsub, err := bus.Subscribe(ctx, busTopic, b.receive)
	cancel()
	if err != nil {
		if !errors.Is(err, dlock.ErrNotSupported) {
			log.Warn("dlock: server: cannot hear other replicas' events", "err", err)
		}
		return b
	}
	b.bus, b.unsub = bus, unsub
	b.pub = make(chan item, pubQueue)
	b.quit = make(chan struct{})
	b.done = make(chan struct{})
	go b.publishLoop()
	return b
}

// ID is this instance's replica ID.
func (b *Bus) ID() string { return b.id }

// Stop ends the subscription and the publisher, waiting for both.
func (b *Bus) Stop() {
	if b.bus == nil {
		return
	}
	b.closed.Do(func() {
		b.unsub()
		close(b.quit)
		<-b.done
	})
}

// Publish shares event, this instance's event as compact, HTML-safe JSON,
// with the others.
func (b *Bus) Publish(event []byte) {
	if b.bus != nil {
		b.queue(item{event: event})
	}
}

// Served tells the others that this instance extended or released the
// lease of token on name through the store: the instance that granted it
// stops tracking it.
func (b *Bus) Served(name, token string) {
	if b.bus != nil {
		b.queue(item{drop: leaseID(name, token)})
	}
}

func (b *Bus) queue(it item) {
	select {
	case b.pub <- it:
	default:
	}
}

// leaseID names a lease on the bus without revealing its token.
func leaseID(name, token string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + token))
	return hex.EncodeToString(sum[:16])
}

// Granted records that the /v1 lease of token on name was granted here,
// so that Hooks.Served hears of it when another instance serves it.
func (b *Bus) Granted(name, token string) {
	if b.bus == nil {
		return
	}
	id := leaseID(name, token)
	b.mu.Lock()
	b.ids[id] = lease{name, token}
	sweep := len(b.ids) >= max(2*b.idsSweep, 64)
	if sweep {
		b.idsSweep = len(b.ids)
	}
	b.mu.Unlock()
	if sweep {
		b.sweep()
	}
}

// sweep forgets the leases no longer tracked; Hooks.Held runs outside
// b.mu, since it takes the lease table's lock.
func (b *Bus) sweep() {
	b.mu.Lock()
	ids := make(map[string]lease, len(b.ids))
	for id, l := range b.ids {
		ids[id] = l
	}
	b.mu.Unlock()
	var gone []string
	for id, l := range ids {
		if !b.hooks.Held(l.name, l.token) {
			gone = append(gone, id)
		}
	}
	b.mu.Lock()
	for _, id := range gone {
		delete(b.ids, id)
	}
	b.idsSweep = len(b.ids)
	b.mu.Unlock()
}

// receive handles a message of the bus. It runs on the store's delivery
// goroutine, so it never blocks.
func (b *Bus) receive(msg []byte) {
	// This instance's own batches come back too: skip them undecoded (its
	// batches start with its ID, see message.appendJSON).
	if bytes.HasPrefix(msg, b.self) {
		return
	}
	var m message
	if json.Unmarshal(msg, &m) != nil || m.Replica == "" || m.Replica == b.id {
		return
	}
	b.mu.Lock()
	b.seen[m.Replica] = time.Now()
	b.mu.Unlock()
	for _, ev := range m.Events {
		b.hooks.Event(m.Replica, ev)
	}
	for _, id := range m.Drop {
		b.mu.Lock()
		l, ok := b.ids[id]
		delete(b.ids, id)
		b.mu.Unlock()
		if ok {
			b.hooks.Served(l.name, l.token)
		}
	}
}

// Count returns how many replicas were heard from lately, this one
// included.
func (b *Bus) Count(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 1
	for id, at := range b.seen {
		if now.Sub(at) > seenFor {
			delete(b.seen, id)
			continue
		}
		n++
	}
	return n
}
