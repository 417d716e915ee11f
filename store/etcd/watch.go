package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watch implements [store.Store]: etcd watches on the keys of every kind
// of the name (a name is one lock: a release of any kind may free it) that
// wake on every deletion (release or lease expiry, which etcd reports too).
// For an election, puts of the election's keys wake too (a new leader).
// It returns once etcd has confirmed the watches.
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	mine, err := kindOf(mode)
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
	var wchs []clientv3.WatchChan
	for _, k := range kinds {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
		if k != kindElection || mine != kindElection {
			opts = append(opts, clientv3.WithFilterPut())
		}
		wch := s.cli.Watch(wctx, s.lockPrefix(k, name), opts...)
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				cancel()
				return nil, nil, storeErr("watch", errors.Join(errors.New("watch not created"), wr.Err()))
			}
		case <-ctx.Done():
			cancel()
			return nil, nil, storeErr("watch", ctx.Err())
		}
		wchs = append(wchs, wch)
	}
	ch := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, wch := range wchs {
		wg.Go(func() {
			for wr := range wch {
				if len(wr.Events) > 0 || wr.Err() != nil {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
	return ch, stop, nil
}

// WatchGrant implements [store.GrantWatcher] for the fair lock with the
// recipe of etcd's own mutex: the waiter watches only the key just before
// its own (one release wakes one waiter, no herd); when that key goes, it
// looks again, and once its key is the first it claims the lock and
// delivers the grant. A goroutine does this until stop is called.
func (s *Store) WatchGrant(ctx context.Context, req store.Request) (<-chan store.Grant, func(), error) {
	if req.Mode != store.ModeFair {
		return nil, nil, fmt.Errorf("%w: etcd store grant watch for mode %v", store.ErrNotSupported, req.Mode)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, storeErr("watch", errors.New("store closed"))
	}
	s.wg.Add(1)
	s.mu.Unlock()
	ch := make(chan store.Grant, 1)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
	done := make(chan struct{})
	go func() {
		defer s.wg.Done()
		defer close(done)
		s.grantLoop(wctx, req, ch)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	return ch, stop, nil
}

func (s *Store) grantLoop(ctx context.Context, req store.Request, ch chan<- store.Grant) {
	pfx := s.lockPrefix(kindFair, req.Name)
	key := s.key(kindFair, req)
	pause := func() bool {
		t := time.NewTimer(50 * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			pause()
			continue
		}
		if len(resp.Kvs) == 0 {
			// Not queued yet (WatchGrant comes before the Acquire that
			// queues): wait for the key to appear.
			s.waitEvent(ctx, key, resp.Header.Revision+1, false)
			continue
		}
		mine := resp.Kvs[0]
		opts := append([]clientv3.OpOption{clientv3.WithMaxCreateRev(mine.CreateRevision - 1)}, clientv3.WithLastCreate()...)
		pr, err := s.cli.Get(ctx, pfx, opts...)
		if err != nil {
			pause()
			continue
		}
		if len(pr.Kvs) > 0 {
			s.waitEvent(ctx, string(pr.Kvs[0].Key), pr.Header.Revision+1, true)
			continue
		}
		g, err := s.Acquire(ctx, req)
		if err == nil && g.Acquired {
			ch <- g
			return
		}
		if err != nil {
			pause()
			continue
		}
		if g.Position == 0 && g.RetryAfter == 0 {
			// Our key is gone (expired or released): nothing to wait for
			// until the Locker queues again.
			s.waitEvent(ctx, key, resp.Header.Revision+1, false)
		}
	}
}

// waitEvent waits from revision rev for key to be deleted (del) or put.
func (s *Store) waitEvent(ctx context.Context, key string, rev int64, del bool) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opt := clientv3.WithFilterPut()
	if !del {
		opt = clientv3.WithFilterDelete()
	}
	for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(rev), opt) {
		if len(wr.Events) > 0 || wr.Err() != nil {
			return
		}
	}
}
