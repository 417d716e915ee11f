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

func (s *Server) handleDemo(w http.ResponseWriter, r *http.Request) {
	pattern := r.PathValue("pattern")
	resource := r.PathValue("resourceId")
	if !slices.Contains(demoPatterns, pattern) {
		writeAPIError(w, badField("pattern", "must be one of "+strings.Join(demoPatterns, ", ")))
		return
	}
	if err := dlock.ValidName(resource); err != nil {
		writeAPIError(w, badField("resourceId", "must be 1-256 bytes of UTF-8 without control characters"))
		return
	}
	dur, e := msParam(r, "durationMs", defaultDemoMs, 0, MaxDemoMs)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	req := dlock.Request{Name: resource, TTL: time.Duration(dur+demoBufferMs) * time.Millisecond}
	var opts []dlock.Option
	var wait time.Duration
	switch pattern {
	case "simple", "redlock":
		req.Mode = dlock.ModeMutex
	case "retry":
		req.Mode = dlock.ModeMutex
		ms, e := msParam(r, "waitMs", defaultDemoWaitMs, 0, MaxWaitMs)
		if e != nil {
			writeAPIError(w, e)
			return
		}
		wait = time.Duration(ms) * time.Millisecond
	case "watchdog":
		req.Mode = dlock.ModeMutex
		req.TTL = watchdogTTL
		opts = append(opts, dlock.WithAutoRenew())
	case "reentrant":
		req.Mode = dlock.ModeReentrant
		if owner := r.URL.Query().Get("owner"); owner != "" {
			if e := validText("owner", owner); e != nil {
				writeAPIError(w, e)
				return
			}
			req.Owner = owner
		}
	case "read":
		req.Mode = dlock.ModeRead
	case "write":
		req.Mode = dlock.ModeWrite
	case "fair":
		req.Mode = dlock.ModeFair
		ms, e := msParam(r, "waitMs", defaultDemoWaitMs, 0, MaxWaitMs)
		if e != nil {
			writeAPIError(w, e)
			return
		}
		wait = time.Duration(ms) * time.Millisecond
		req.Queue = wait > 0
	case "semaphore":
		req.Mode = dlock.ModeSemaphore
		limit, e := msParam(r, "limit", defaultDemoLimit, 1, 1000)
		if e != nil {
			writeAPIError(w, e)
			return
		}
		req.Limit = int(limit)
	}
	extendWriteDeadline(w, wait+time.Duration(dur)*time.Millisecond)

	ctx, cancel := s.waitContext(r.Context(), wait)
	start := time.Now()
	lease, err := s.locker.Acquire(ctx, req, wait > 0, opts...)
	cancel()
	if err != nil {
		writeAPIError(w, demoError(ctx, resource, err))
		return
	}
	waited := time.Since(start)
	s.demo.add(lease)
	defer s.demo.remove(lease)

	// The simulated operation.
	op := time.NewTimer(time.Duration(dur) * time.Millisecond)
	defer op.Stop()
	var lost, gone, halted bool
	select {
	case <-op.C:
	case <-lease.Done():
		lost = true
	case <-r.Context().Done():
		gone = true
	case <-s.halt:
		halted = true
	}
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
		writeJSON(w, http.StatusOK, demoBody{Success: true, ResourceID: resource, DurationMs: dur,
			Fence: lease.Fence(), Pattern: pattern, Mode: modeName(lease.Mode()), Count: countIfReentrant(lease),
			WaitedMs: waitedIf(wait, waited)})
	}
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
