package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// The seed's demo endpoint, POST /api/locks/{pattern}/{resourceId}, runs a
// simulated operation of durationMs under a lock on resourceId and answers
// when the operation is over (as the seed's "Terminal 1 / Terminal 2"
// walkthrough implies: the first request holds the lock while it runs):
//
//	200 {"success":true,"resourceId":..,"durationMs":..,"fence":..}
//	409 {"error":"Resource locked","retryAfterMs":..} with Retry-After
//	503 {"error":"Quorum not reached","message":"Unable to acquire lock on majority of instances"}
//
// The lease's TTL is durationMs + 5000 (the seed's 5 s safety buffer),
// except for the watchdog, which holds a 10 s lease renewed every ~3 s for
// as long as the operation runs. The lease is released when the operation
// ends, when the client goes away, and at shutdown.

var demoPatterns = []string{"simple", "retry", "watchdog", "reentrant", "read", "write", "fair", "redlock", "semaphore"}

const (
	defaultDemoMs     = 15_000
	defaultDemoWaitMs = 5_000 // retry and fair: "try for 5s, then fall back"
	defaultDemoLimit  = 3
	demoBufferMs      = 5_000
	watchdogTTL       = 10 * time.Second
)

type demoBody struct {
	Success    bool   `json:"success"`
	ResourceID string `json:"resourceId"`
	DurationMs int64  `json:"durationMs"`
	Fence      int64  `json:"fence"`
	Pattern    string `json:"pattern"`
	Mode       string `json:"mode"`
	Count      int    `json:"count,omitempty"`
	WaitedMs   int64  `json:"waitedMs,omitempty"`
}

// demoRequest is a demo request read from its path and query.
type demoRequest struct {
	pattern string
	req     dlock.Request
	opts    []dlock.Option
	dur     int64         // durationMs of the operation
	wait    time.Duration // retry and fair: how long to wait for the lock
}

func (s *Server) handleDemo(w http.ResponseWriter, r *http.Request) {
	d, e := parseDemo(r)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	extendWriteDeadline(w, d.wait+time.Duration(d.dur)*time.Millisecond)

	ctx, cancel := s.waitContext(r.Context(), d.wait)
	start := time.Now()
	lease, err := s.locker.Acquire(ctx, d.req, d.wait > 0, d.opts...)
	cancel()
	if err != nil {
		writeAPIError(w, demoError(ctx, d.req.Name, err))
		return
	}
	waited := time.Since(start)
	s.demo.add(lease)
	defer s.demo.remove(lease)

	lost, gone, halted := s.runDemo(r.Context(), lease, time.Duration(d.dur)*time.Millisecond)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	relErr := lease.Release(rctx)
	rcancel()
	switch {
	case gone: // nobody reads this
		writeError(w, 499, "canceled", "the client went away; the operation was cut short and the lock released")
	case halted:
		writeError(w, http.StatusServiceUnavailable, "shutting down", "the server is shutting down; the operation was cut short and the lock released")
	case lost || errors.Is(relErr, dlock.ErrLeaseLost):
		writeError(w, http.StatusGone, "Lease lost", "the lease was lost during the operation; its effects must be presumed unsafe")
	default:
		writeJSON(w, http.StatusOK, demoBody{Success: true, ResourceID: d.req.Name, DurationMs: d.dur,
			Fence: lease.Fence(), Pattern: d.pattern, Mode: modeName(lease.Mode()), Count: countIfReentrant(lease),
			WaitedMs: waitedIf(d.wait, waited)})
	}
}

// runDemo is the simulated operation: it runs for dur under lease, and
// says what cut it short: the lease's loss, the client going away, or the
// shutdown timeout.
func (s *Server) runDemo(ctx context.Context, lease *dlock.Lease, dur time.Duration) (lost, gone, halted bool) {
	op := time.NewTimer(dur)
	defer op.Stop()
	select {
	case <-op.C:
	case <-lease.Done():
		lost = true
	case <-ctx.Done():
		gone = true
	case <-s.life.halt:
		halted = true
	}
	return lost, gone, halted
}

// parseDemo reads a demo request, or returns the 400 naming the field.
func parseDemo(r *http.Request) (*demoRequest, *apiError) {
	d := &demoRequest{pattern: r.PathValue("pattern")}
	resource := r.PathValue("resourceId")
	if !slices.Contains(demoPatterns, d.pattern) {
		return nil, badField("pattern", "must be one of "+strings.Join(demoPatterns, ", "))
	}
	if err := dlock.ValidName(resource); err != nil {
		return nil, badField("resourceId", "must be 1-256 bytes of UTF-8 without control characters")
	}
	var e *apiError
	if d.dur, e = msParam(r, "durationMs", defaultDemoMs, 0, MaxDemoMs); e != nil {
		return nil, e
	}
	d.req = dlock.Request{Name: resource, TTL: time.Duration(d.dur+demoBufferMs) * time.Millisecond}
	if e := d.pick(r); e != nil {
		return nil, e
	}
	return d, nil
}

// pick sets the mode and the pattern's own parameters of d.
func (d *demoRequest) pick(r *http.Request) *apiError {
	waitMs := func() *apiError {
		ms, e := msParam(r, "waitMs", defaultDemoWaitMs, 0, MaxWaitMs)
		d.wait = time.Duration(ms) * time.Millisecond
		return e
	}
	switch d.pattern {
	case "simple", "redlock":
		d.req.Mode = dlock.ModeMutex
	case "retry":
		d.req.Mode = dlock.ModeMutex
		return waitMs()
	case "watchdog":
		d.req.Mode = dlock.ModeMutex
		d.req.TTL = watchdogTTL
		d.opts = append(d.opts, dlock.WithAutoRenew())
	case "reentrant":
		d.req.Mode = dlock.ModeReentrant
		if owner := r.URL.Query().Get("owner"); owner != "" {
			if e := validText("owner", owner); e != nil {
				return e
			}
			d.req.Owner = owner
		}
	case "read":
		d.req.Mode = dlock.ModeRead
	case "write":
		d.req.Mode = dlock.ModeWrite
	case "fair":
		d.req.Mode = dlock.ModeFair
		e := waitMs()
		d.req.Queue = d.wait > 0
		return e
	case "semaphore":
		d.req.Mode = dlock.ModeSemaphore
		limit, e := msParam(r, "limit", defaultDemoLimit, 1, 1000)
		d.req.Limit = int(limit)
		return e
	}
	return nil
}

func countIfReentrant(ls *dlock.Lease) int {
	if ls.Mode() == dlock.ModeReentrant {
		return ls.Count()
	}
	return 0
}

func waitedIf(wait, waited time.Duration) int64 {
	if wait > 0 {
		return waited.Milliseconds()
	}
	return 0
}

// demoError maps an acquire error to the seed's response shapes.
func demoError(ctx context.Context, resource string, err error) *apiError {
	e := lockError(ctx, resource, err)
	switch {
	case e.Status == http.StatusConflict && e.Error == "locked":
		e.Error = "Resource locked"
	case errors.Is(err, dlock.ErrNoQuorum):
		e.Error, e.Message = "Quorum not reached", "Unable to acquire lock on majority of instances"
	}
	return e
}

// demoSet tracks the leases of running demo operations, so that shutdown
// can release any a cut-short handler left.
type demoSet struct {
	mu sync.Mutex
	m  map[*dlock.Lease]struct{}
}

func (d *demoSet) add(ls *dlock.Lease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = make(map[*dlock.Lease]struct{})
	}
	d.m[ls] = struct{}{}
}

func (d *demoSet) remove(ls *dlock.Lease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, ls)
}

func (s *Server) releaseDemo() {
	s.demo.mu.Lock()
	leases := make([]*dlock.Lease, 0, len(s.demo.m))
	for ls := range s.demo.m {
		leases = append(leases, ls)
	}
	s.demo.m = nil
	s.demo.mu.Unlock()
	for _, ls := range leases {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = ls.Release(ctx)
		cancel()
	}
}
