package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// watchSetup bounds how long Watch waits for the nodes to start watching
// when no node timeout is set.
const watchSetup = 500 * time.Millisecond

// Watch implements [store.Store]: it watches name on every node and merges
// their wake-ups into one channel (a slow receiver sees one pending
// wake-up). It waits until every node has started watching, or for the
// node timeout (500ms unless set); a node that fails or is late is left
// out, and the waiter's retry timer covers it. Watch fails only when every
// node failed. Stop ends the watches on all nodes and waits for them; the
// watches also end with ctx. [Store.Close] waits for every watch to be
// stopped.
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	if err := s.enter(); err != nil {
		return nil, nil, err
	}
	n := len(s.nodes)
	out := make(chan struct{}, 1)
	ready := make(chan result[error], n)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(n)
	s.wg.Add(n)
	for i := range n {
		go func() {
			defer s.wg.Done()
			defer wg.Done()
			ch, stop, err := s.nodes[i].Watch(wctx, name, mode)
			ready <- result[error]{i, err}
			if err != nil {
				return
			}
			defer stop()
			for {
				select {
				case _, ok := <-ch:
					if !ok {
						return
					}
					select {
					case out <- struct{}{}:
					default:
					}
				case <-wctx.Done():
					return
				}
			}
		}()
	}
	s.wg.Done() // the watch goroutines now keep s.wg above zero
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}

	setup := watchSetup
	if s.cfg.nodeTimeout > 0 {
		setup = s.cfg.nodeTimeout
	}
	timer := time.NewTimer(setup)
	defer timer.Stop()
	var errs []error
	for range n {
		select {
		case r := <-ready:
			if r.val != nil {
				errs = append(errs, nodeErr("watch", r.node, r.val))
				s.cfg.logger.Debug("dlock: redlock watch failed on a node", "name", name, "node", r.node, "err", r.val)
			}
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	if len(errs) == n {
		stop()
		return nil, nil, &QuorumError{Op: "watch", Quorum: s.quorum, Nodes: errs}
	}
	return out, stop, nil
}
