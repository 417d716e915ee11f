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
			s.watchNode(wctx, i, name, mode, out, ready)
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

	errs := s.awaitWatches(ctx, name, ready)
	if len(errs) == n {
		stop()
		return nil, nil, &QuorumError{Op: "watch", Quorum: s.quorum, Nodes: errs}
	}
	return out, stop, nil
}

// watchNode watches name on node i, reports on ready whether that watch
// started, and then passes the node's wake-ups on to out (dropped when one
// is already pending there) until the node's watch or wctx ends; it stops
// the node's watch before it returns.
func (s *Store) watchNode(wctx context.Context, i int, name string, mode store.Mode, out chan<- struct{}, ready chan<- result[error]) {
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
}

// awaitWatches waits until every node reported on ready whether its watch
// started, the node timeout (watchSetup unless set) passed, or ctx ended,
// whichever comes first, and returns the failures reported meanwhile, one
// [*store.StoreError] per failed node.
func (s *Store) awaitWatches(ctx context.Context, name string, ready <-chan result[error]) []error {
	setup := watchSetup
	if s.cfg.nodeTimeout > 0 {
		setup = s.cfg.nodeTimeout
	}
	timer := time.NewTimer(setup)
	defer timer.Stop()
	var errs []error
	for range len(s.nodes) {
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
	return errs
}
