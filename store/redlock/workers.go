package redlock

import (
	"sync"
	"sync/atomic"
	"time"
)

// workers runs a Store's requests to its nodes on goroutines it keeps
// between operations. A node request's call chain (the node's store, its
// client) is deep, and a new goroutine starts on the smallest stack: it
// grew, copying its frames each time, on every request, about a tenth of
// the client's CPU at 64 goroutines (see docs/benchmarks.md).
type workers struct {
	jobs    chan func() // unbuffered: a send succeeds only to an idle worker
	quit    chan struct{}
	idle    time.Duration // how long an idle worker waits for a job before it exits
	wg      sync.WaitGroup
	started atomic.Int64 // workers started, for tests
}

func newWorkers(idle time.Duration) *workers {
	return &workers{jobs: make(chan func()), quit: make(chan struct{}), idle: idle}
}

// run runs job on an idle worker, or on a new one when none is idle.
func (w *workers) run(job func()) {
	select {
	case w.jobs <- job:
	default:
		w.wg.Add(1)
		w.started.Add(1)
		go w.work(job)
	}
}

func (w *workers) work(job func()) {
	defer w.wg.Done()
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(w.idle)
		select {
		case job = <-w.jobs:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}

// stop ends the idle workers and waits for them. Every job must have
// returned, and run must not be called again.
func (w *workers) stop() {
	close(w.quit)
	w.wg.Wait()
}
