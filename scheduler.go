package dlock

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// scheduler is the one goroutine per Locker that renews auto-renewed leases
// and ends leases whose local validity ran out. Its heap orders leases by
// their next deadline; all fields are guarded by Locker.mu. It runs no
// code of the caller's: renewals go out on goroutines of their own, and
// what follows a loss it finds (loss hooks, the observer's event, the log
// line, the release behind) on the Locker's lanes (notify.go), so that
// nothing slow there holds up other leases' renewals or loss signals.
type scheduler struct {
	l *Locker
	h leaseHeap
	// timer wakes the loop. It is reset only under Locker.mu, by the loop
	// and by reschedule, so wakeAt is always when it fires.
	timer *time.Timer
	// wakeAt is when the loop looks at the heap next. A lease due before
	// it moves the timer earlier, without waking the loop (a goroutine
	// woken per lease costs more than the lease's own work on an
	// uncontended lock); one due later waits for that look.
	wakeAt time.Time
	// looks counts the loop's passes over the heap.
	looks int
}

type leaseHeap []*Lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *leaseHeap) Push(x any) {
	ls := x.(*Lease)
	ls.index = len(*h)
	*h = append(*h, ls)
}
func (h *leaseHeap) Pop() any {
	old := *h
	ls := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	ls.index = -1
	return ls
}

// deadline returns when the scheduler must next look at ls.
func (ls *Lease) deadline() time.Time {
	if ls.autoRenew && !ls.extending && !ls.atMaxHold && ls.renewAt.Before(ls.validUntil) {
		return ls.renewAt
	}
	return ls.validUntil
}

// reschedule puts ls in the heap at its current deadline. Caller holds l.mu.
func (s *scheduler) reschedule(ls *Lease) {
	ls.next = ls.deadline()
	if ls.index >= 0 {
		heap.Fix(&s.h, ls.index)
	} else {
		heap.Push(&s.h, ls)
	}
	if ls.next.Before(s.wakeAt) {
		s.wakeAt = ls.next
		s.timer.Reset(time.Until(ls.next))
	}
}

// remove takes ls out of the heap. Caller holds l.mu.
func (s *scheduler) remove(ls *Lease) {
	if ls.index >= 0 {
		heap.Remove(&s.h, ls.index)
	}
}

// batchWindow is how far ahead of its renewal time a lease may be renewed so
// that renewals falling close together share one pipelined batch.
func batchWindow(ls *Lease) time.Duration {
	return min(ls.renewEvery/8, 50*time.Millisecond)
}

func (s *scheduler) run(stop <-chan struct{}) {
	l := s.l
	defer s.timer.Stop()
	for {
		var batch []*Lease
		var lost []*Lease
		l.mu.Lock()
		s.looks++
		now := time.Now()
		for len(s.h) > 0 {
			ls := s.h[0]
			if !now.Before(ls.validUntil) {
				lost = append(lost, ls)
				l.loseLocked(ls, ls.expiredErr())
				continue
			}
			if !ls.autoRenew || ls.extending || ls.atMaxHold || ls.renewAt.Sub(now) > batchWindow(ls) {
				break
			}
			ls.extending = true
			ls.next = ls.validUntil
			heap.Fix(&s.h, 0)
			batch = append(batch, ls)
		}
		wait := time.Hour
		if len(s.h) > 0 {
			wait = max(s.h[0].next.Sub(now), 0)
		}
		s.wakeAt = now.Add(wait)
		s.timer.Reset(wait)
		l.mu.Unlock()
		if len(lost) > 0 {
			// Done and Err tell of the losses already; the hooks, reports
			// and releases that follow must not hold up other leases.
			l.signals.push(func() {
				for _, ls := range lost {
					l.afterLoss(ls)
				}
			})
		}
		if len(batch) > 0 {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.renewChunked(batch)
			}()
		}
		select {
		case <-s.timer.C:
		case <-stop:
			return
		}
	}
}

// maxRenewBatch caps the leases of one Extend call, and renewInFlight the
// calls of one batch in flight at once: when renewals fall behind (a
// million leases taken on a loaded machine), the leases that came due
// together go out in calls that each finish within the op timeout, not in
// one call of hundreds of thousands that times out whole and loses them
// all (measured: go run ./bench -scale, auto-renewed leases at 1 000 000).
const (
	maxRenewBatch = 5000
	renewInFlight = 4
)

// renewChunked renews batch in calls of at most maxRenewBatch leases, at
// most renewInFlight at a time, and returns when all are done. Each call
// takes its deadline when it is sent.
func (l *Locker) renewChunked(batch []*Lease) {
	if len(batch) <= maxRenewBatch {
		l.renew(batch)
		return
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, renewInFlight)
	for len(batch) > 0 {
		chunk := batch[:min(len(batch), maxRenewBatch)]
		batch = batch[len(chunk):]
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			l.renew(chunk)
		})
	}
	wg.Wait()
}

// renew extends a batch of leases in one pipelined store call. Each lease's
// extension slot was taken by the loop; settleLocked gives it back.
func (l *Locker) renew(batch []*Lease) {
	batch, reqs, deadline := l.renewals(batch)
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	sent := time.Now()
	errs := l.store.Extend(ctx, reqs)
	cancel()
	l.settleRenewals(batch, reqs, sent, errs)
}

// renewals returns the leases of batch to renew, their requests, and the
// deadline of the call: the op timeout, or the earliest validity. A lease
// with nothing left of its max hold worth renewing for is lost instead,
// before the call is sent.
func (l *Locker) renewals(batch []*Lease) ([]*Lease, []Request, time.Time) {
	reqs := make([]Request, 0, len(batch))
	var lost []*Lease
	l.mu.Lock()
	deadline := time.Now().Add(l.cfg.opTimeout)
	send := batch[:0]
	for _, ls := range batch {
		ttl, ok := ls.holdTTLLocked(ls.req.TTL - ls.delay)
		if !ok {
			ls.freeExtendLocked()
			l.loseLocked(ls, &maxHoldError{ls.maxHold})
			lost = append(lost, ls)
			continue
		}
		req := ls.req
		req.TTL = ttl + ls.delay
		reqs = append(reqs, req)
		send = append(send, ls)
		ls.sendingLocked(ttl)
		if ls.validUntil.Before(deadline) {
			deadline = ls.validUntil
		}
	}
	l.mu.Unlock()
	for _, ls := range lost {
		l.afterLoss(ls)
	}
	return send, reqs, deadline
}

// settleRenewals applies the store's answers errs to the renewals reqs of
// batch, sent at sent. The renewals' events are queued under l.mu, with
// their leases settled, so that a loss found later is reported after them.
func (l *Locker) settleRenewals(batch []*Lease, reqs []Request, sent time.Time, errs []error) {
	var lost []*Lease
	var evs []Event
	l.mu.Lock()
	for i, ls := range batch {
		switch ls.settleLocked(sent, reqs[i].TTL-ls.delay, errs[i]) {
		case extendOK:
			evs = append(evs, renewEvent(ls, "ok", sent, nil))
		case extendLost:
			result := "error"
			if errors.Is(errs[i], ErrNotHeld) {
				result = "lost"
			}
			err := errs[i]
			if err == nil {
				err = ls.err // confirmed after the lease ran out
			}
			evs = append(evs, renewEvent(ls, result, sent, err))
			lost = append(lost, ls)
		case extendUnknown:
			// Not confirmed; try again soon while the lease is still valid.
			evs = append(evs, renewEvent(ls, "error", sent, errs[i]))
			// Not sooner than minBackoff: near the end of validity a third
			// of what is left shrinks towards nothing.
			ls.renewAt = time.Now().Add(max(min(l.cfg.minBackoff*4, time.Until(ls.validUntil)/3), l.cfg.minBackoff))
			l.sched.reschedule(ls)
		}
	}
	l.report(evs...)
	l.mu.Unlock()
	for _, ls := range lost {
		l.afterLoss(ls)
	}
}

func renewEvent(ls *Lease, result string, sent time.Time, err error) Event {
	return Event{Kind: EventRenew, Mode: ls.req.Mode, Name: ls.req.Name, Result: result, Fence: ls.fence,
		Duration: time.Since(sent), Lease: ls.id, Start: sent, Err: err, Owner: ls.req.Holder}
}
