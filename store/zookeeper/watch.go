package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/go-zookeeper/zk"
)

// Watch implements [store.Store]: a ZooKeeper child watch on the lock's
// znode, set again after each event, wakes the caller when a node goes
// (release, reaped TTL or expired session). The fair lock's waiters use
// [Store.WatchGrant] instead, which watches only their predecessor.
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	kind, err := kindOf(mode)
	if err != nil {
		return nil, nil, err
	}
	dir := s.dir(kind, name)
	if err := s.ensure(kind, dir); err != nil {
		return nil, nil, storeErr("watch", err)
	}
	_, _, evc, err := s.conn.ChildrenW(dir)
	if err != nil {
		return nil, nil, storeErr("watch", err)
	}
	ch := make(chan struct{}, 1)
	return s.spawn(func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			case <-evc:
			}
			select {
			case ch <- struct{}{}:
			default:
			}
			for {
				if _, _, evc, err = s.conn.ChildrenW(dir); err == nil {
					break
				}
				if errors.Is(err, zk.ErrNoNode) {
					var ok bool
					if ok, _, evc, err = s.conn.ExistsW(dir); err == nil || ok {
						break
					}
				}
				if !sleep(stop, 100*time.Millisecond) {
					return
				}
			}
		}
	}, ch)
}

// spawn runs fn in a goroutine owned by the store; the returned stop ends
// it and waits.
func (s *Store) spawn(fn func(stop <-chan struct{}), ch chan struct{}) (<-chan struct{}, func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, storeErr("watch", errors.New("store closed"))
	}
	s.wg.Add(1)
	s.mu.Unlock()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer s.wg.Done()
		defer close(done)
		merged := make(chan struct{})
		fnDone := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			select {
			case <-stop:
			case <-s.stop:
			case <-fnDone:
			}
			close(merged)
		})
		fn(merged)
		close(fnDone)
		wg.Wait()
	}()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			close(stop)
			<-done
		})
	}, nil
}

func sleep(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// WatchGrant implements [store.GrantWatcher] for the fair lock with the
// recipe of seeds 001 and 002: the waiter watches only the node just
// before its own (one release wakes one waiter, no herd), looks again when
// it goes, and delivers the grant once its node holds (the first, with no
// node of another pattern beside a hold behind it; the first waits on the
// children then).
func (s *Store) WatchGrant(ctx context.Context, req store.Request) (<-chan store.Grant, func(), error) {
	if req.Mode != store.ModeFair {
		return nil, nil, fmt.Errorf("%w: zookeeper store grant watch for mode %v", store.ErrNotSupported, req.Mode)
	}
	gch := make(chan store.Grant, 1)
	dir := s.dir("f", req.Name)
	_, stop, err := s.spawn(func(stop <-chan struct{}) {
		for {
			names, _, evc, err := s.conn.ChildrenW(dir)
			if errors.Is(err, zk.ErrNoNode) {
				var ok bool
				ok, _, evc, err = s.conn.ExistsW(dir)
				if err == nil && ok {
					continue
				}
			}
			if err != nil {
				if !sleep(stop, 100*time.Millisecond) {
					return
				}
				continue
			}
			var es []entry
			for _, n := range names {
				if e, ok := parse(n); ok {
					es = append(es, e)
				}
			}
			sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
			i := find(es, req.Token)
			if i >= 0 && holds("f", es, i, 0) {
				g, err := s.grant("f", req, dir, dir+"/"+es[i].name, es, i, nil)
				if err == nil && g.Acquired {
					gch <- g
					return
				}
			} else if i > 0 {
				// Watch the predecessor only.
				ok, _, pev, err := s.conn.ExistsW(dir + "/" + es[i-1].name)
				if err == nil && !ok {
					continue
				}
				if err == nil {
					evc = pev
				}
			}
			select {
			case <-stop:
				return
			case <-evc:
			}
		}
	}, nil)
	if err != nil {
		return nil, nil, err
	}
	return gch, stop, nil
}
