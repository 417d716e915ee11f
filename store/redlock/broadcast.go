package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"

	"github.com/dlock-dev/dlock/store"
)

var _ store.Broadcaster = (*Store)(nil)

// msgIDLen is the length of the random ID that Publish puts before each
// message, so that a subscriber hearing it from several nodes passes it on
// once.
const msgIDLen = 16

// dedupeWindow is how many recent message IDs a subscription remembers.
const dedupeWindow = 4096

// Publish implements [store.Broadcaster]: msg goes to every node that is a
// Broadcaster, in parallel, behind a random message ID. It succeeds when
// at least one node took it; it returns an error wrapping
// [store.ErrNotSupported] when no node is a Broadcaster.
func (s *Store) Publish(ctx context.Context, topic string, msg []byte) error {
	bs := s.broadcasters()
	if len(bs) == 0 {
		return fmt.Errorf("%w: no redlock node can broadcast", store.ErrNotSupported)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.wg.Done()
	framed := make([]byte, msgIDLen+len(msg))
	rand.Read(framed[:msgIDLen])
	copy(framed[msgIDLen:], msg)
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Go(func() { errs[i] = b.Publish(ctx, topic, framed) })
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("dlock: redlock publish: %w", errors.Join(errs...))
}

// Subscribe implements [store.Broadcaster]: it subscribes on every node that
// is a Broadcaster and passes each message on once, however many nodes
// carried it. It fails only when no node could subscribe.
func (s *Store) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	bs := s.broadcasters()
	if len(bs) == 0 {
		return nil, fmt.Errorf("%w: no redlock node can broadcast", store.ErrNotSupported)
	}
	if fn == nil {
		return nil, &store.InvalidError{Field: "fn", Reason: "must not be nil"}
	}
	d := &dedupe{seen: make(map[[msgIDLen]byte]struct{}), fn: fn}
	stops := make([]func(), len(bs))
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Go(func() { stops[i], errs[i] = b.Subscribe(ctx, topic, d.deliver) })
	}
	wg.Wait()
	stop := func() {
		for _, st := range stops {
			if st != nil {
				st()
			}
		}
	}
	for _, err := range errs {
		if err == nil {
			var once sync.Once
			return func() { once.Do(stop) }, nil
		}
	}
	stop()
	return nil, fmt.Errorf("dlock: redlock subscribe: %w", errors.Join(errs...))
}

func (s *Store) broadcasters() []store.Broadcaster {
	var bs []store.Broadcaster
	for _, n := range s.nodes {
		if b, ok := n.(store.Broadcaster); ok {
			bs = append(bs, b)
		}
	}
	return bs
}

// dedupe passes on each message ID once, one call at a time.
type dedupe struct {
	mu   sync.Mutex
	seen map[[msgIDLen]byte]struct{}
	ring [dedupeWindow][msgIDLen]byte
	next int
	full bool
	fn   func([]byte)
}

func (d *dedupe) deliver(framed []byte) {
	if len(framed) < msgIDLen {
		return
	}
	id := [msgIDLen]byte(framed[:msgIDLen])
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[id]; ok {
		return
	}
	if d.full {
		delete(d.seen, d.ring[d.next])
	}
	d.ring[d.next] = id
	d.seen[id] = struct{}{}
	d.next++
	if d.next == dedupeWindow {
		d.next, d.full = 0, true
	}
	d.fn(framed[msgIDLen:])
}
