package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-dev/dlock/store"
)

var _ store.Broadcaster = (*Store)(nil)

// busTTL is the life of a published message's key: long enough for every
// watcher to hear it, short enough that messages do not pile up.
const busTTL = 10 * time.Second

// busState is the lease that published messages share, renewed by
// granting a new one when it is half used.
type busState struct {
	mu      sync.Mutex
	lease   clientv3.LeaseID
	granted time.Time
}

func (s *Store) busPrefix(topic string) (string, error) {
	if err := store.ValidName(topic); err != nil {
		return "", err
	}
	return s.prefix + "b/" + nameKey("b", topic) + "/", nil
}

// busLease returns a lease with at least half of busTTL left.
func (s *Store) busLease(ctx context.Context) (clientv3.LeaseID, error) {
	b := &s.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lease != 0 && time.Since(b.granted) < busTTL/2 {
		return b.lease, nil
	}
	start := time.Now()
	g, err := s.cli.Grant(ctx, int64(busTTL/time.Second))
	if err != nil {
		return 0, err
	}
	b.lease, b.granted = g.ID, start
	return g.ID, nil
}

// Publish implements [store.Broadcaster]: msg becomes a key under the
// topic's prefix with a 10 s lease, which every subscriber's watch
// reports. Each message is one etcd revision.
func (s *Store) Publish(ctx context.Context, topic string, msg []byte) error {
	prefix, err := s.busPrefix(topic)
	if err != nil {
		return err
	}
	lease, err := s.busLease(ctx)
	if err != nil {
		return storeErr("publish", err)
	}
	var id [16]byte
	rand.Read(id[:])
	if _, err := s.cli.Put(ctx, prefix+hex.EncodeToString(id[:]), string(msg), clientv3.WithLease(lease)); err != nil {
		return storeErr("publish", err)
	}
	return nil
}

// Subscribe implements [store.Broadcaster] with a watch of the topic's
// prefix, from the revision current when it starts; it returns once etcd
// confirmed the watch or ctx ends. A watch that breaks is made again from
// the revision after the last one heard, so a message is lost only when
// etcd compacted it away meanwhile.
func (s *Store) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	prefix, err := s.busPrefix(topic)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, &store.InvalidError{Field: "fn", Reason: "must not be nil"}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, storeErr("subscribe", errors.New("store closed"))
	}
	s.wg.Add(1)
	s.mu.Unlock()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	sub := &subscription{fn: fn, cancel: cancel, ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer s.wg.Done()
		defer close(sub.done)
		s.watchTopic(wctx, prefix, sub)
	}()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-sub.done:
		}
	}()
	select {
	case <-sub.ready:
	case <-ctx.Done():
	case <-sub.done:
	}
	return sub.stop, nil
}

// subscription is one Subscribe's delivery of a topic's messages to fn.
type subscription struct {
	fn        func([]byte)
	cancel    context.CancelFunc // ends the watch
	ready     chan struct{}      // closed once etcd confirmed the first watch
	readyOnce sync.Once
	done      chan struct{} // closed when the watch loop returned
	mu        sync.Mutex    // held while fn runs
	stopped   bool
	stopOnce  sync.Once
}

// deliver calls fn with msg unless the subscription was stopped.
func (sub *subscription) deliver(msg []byte) {
	sub.mu.Lock()
	if !sub.stopped {
		sub.fn(msg)
	}
	sub.mu.Unlock()
}

// stop ends the subscription and waits for its watch loop: fn is not
// called once stop returns.
func (sub *subscription) stop() {
	sub.stopOnce.Do(func() {
		sub.mu.Lock()
		sub.stopped = true
		sub.mu.Unlock()
		sub.cancel()
		<-sub.done
	})
}

// watchTopic watches prefix for new messages and delivers each to sub until
// wctx ends or the store closes; it closes sub.ready once etcd confirmed
// the first watch. A watch that breaks is made again, after 100 ms, from
// the revision after the last one heard.
func (s *Store) watchTopic(wctx context.Context, prefix string, sub *subscription) {
	var rev int64
	for wctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithCreatedNotify()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		for wr := range s.cli.Watch(wctx, prefix, opts...) {
			if wr.Created {
				sub.readyOnce.Do(func() { close(sub.ready) })
				if rev == 0 {
					rev = wr.Header.Revision
				}
			}
			if wr.CompactRevision > rev {
				rev = wr.CompactRevision - 1
			}
			for _, ev := range wr.Events {
				rev = ev.Kv.ModRevision
				sub.deliver(ev.Kv.Value)
			}
		}
		select {
		case <-wctx.Done():
		case <-s.stop:
			sub.cancel()
		case <-time.After(100 * time.Millisecond): // before watching again
		}
	}
}
