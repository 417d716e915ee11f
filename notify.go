package dlock

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// lane runs functions one at a time, in the order they were pushed, on a
// goroutine that runs while it has work: what the scheduler hands it (loss
// hooks, observer events, log lines) never holds the scheduler up. Its
// zero value is ready; close waits for the work pushed before it.
type lane struct {
	mu      sync.Mutex
	queue   []func()
	running bool
	closed  bool
	wg      sync.WaitGroup
}

// push queues fn. After close, fn runs at once in the caller.
func (q *lane) push(fn func()) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		fn()
		return
	}
	q.queue = append(q.queue, fn)
	if !q.running {
		q.running = true
		q.wg.Go(q.drain)
	}
	q.mu.Unlock()
}

func (q *lane) drain() {
	for {
		q.mu.Lock()
		work := q.queue
		q.queue = nil
		if len(work) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		for _, fn := range work {
			fn()
		}
	}
}

// close waits for the work pushed so far; later pushes run in their caller.
func (q *lane) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wg.Wait()
}

// report queues evs for the observer, behind every report queued before
// them. Callers that order a lease's reports (its renewals, then its loss)
// queue them under l.mu, or after a change they made under l.mu.
func (l *Locker) report(evs ...Event) {
	if l.cfg.observer == nil || len(evs) == 0 {
		return
	}
	l.reports.push(func() {
		for _, ev := range evs {
			l.cfg.observer(ev)
		}
	})
}

// emitLoss queues the report of the loss of ls. Its error is read under
// l.mu: it was set when ls was lost, before this is called.
func (l *Locker) emitLoss(ls *Lease) {
	if l.cfg.observer == nil {
		return
	}
	l.mu.Lock()
	err := ls.err
	l.mu.Unlock()
	l.report(Event{Kind: EventLeaseLost, Mode: ls.req.Mode, Name: ls.req.Name, Fence: ls.fence, Duration: time.Since(ls.acquiredAt), Lease: ls.id, Err: err, Owner: ls.req.Holder})
}

// logLoss queues the log line of the loss of ls: a warning for an
// auto-renewed lease; for one that nothing renews, its holder let it run
// out (or was refused an Extend), which is the holder's business, not a
// fault here.
func (l *Locker) logLoss(ls *Lease) {
	level, msg := slog.LevelInfo, "dlock: lease ended unrenewed"
	if ls.autoRenew {
		level, msg = slog.LevelWarn, "dlock: lease lost"
	}
	log := l.cfg.logger
	if !log.Enabled(context.Background(), level) {
		return
	}
	l.mu.Lock()
	err := ls.err
	l.mu.Unlock()
	l.reports.push(func() {
		log.Log(context.Background(), level, msg, "name", ls.req.Name, "fence", ls.fence, "err", err)
	})
}
