package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server/auth"
	"github.com/dlock-dev/dlock/store"
)

// acquireBody is the JSON body of POST /v1/locks/{name}/acquire.
type acquireBody struct {
	TTLMs      *int64 `json:"ttlMs"`
	WaitMs     *int64 `json:"waitMs"`
	Mode       string `json:"mode"`
	Limit      *int64 `json:"limit"`
	Fair       bool   `json:"fair"`
	Owner      string `json:"owner"`
	Token      string `json:"token"`
	Queue      bool   `json:"queue"`
	QueueTTLMs *int64 `json:"queueTtlMs"`
	// LockDelayMs keeps the name held that long after the lease ends by
	// expiry rather than by release (dlock.WithLockDelay).
	LockDelayMs *int64 `json:"lockDelayMs"`
	// MaxHoldMs bounds how long the lease can be held: extends are capped
	// so that it ends by then (dlock.WithMaxHold). It is recorded with the
	// hold on the store (store.Request.MaxHold), so every instance caps
	// alike.
	MaxHoldMs *int64 `json:"maxHoldMs"`
	// Data is the caller's data, kept with the hold and shown with its
	// owner (store.Request.Data).
	Data *string `json:"data"`
	// MinHoldMs keeps an exclusive hold at least this long from its grant
	// (store.Request.MinHold): a release before then leaves it to the
	// store's expiry at grant + minHoldMs.
	MinHoldMs *int64 `json:"minHoldMs"`
}

// acquireParams is a validated acquire.
type acquireParams struct {
	req     dlock.Request
	wait    time.Duration
	delay   time.Duration // lock-delay
	maxHold time.Duration // 0: none
}

// MaxHoldMs bounds maxHoldMs (dlock.MaxHold).
const MaxHoldMs = int64(dlock.MaxHold / time.Millisecond)

const maxLimit = 1_000_000

// decodeAcquire reads and validates an acquire of the lock name. Every
// error is a 400 naming the field, or a 413.
func decodeAcquire(name string, body io.Reader) (acquireParams, *apiError) {
	var b acquireBody
	var e *apiError
	if e = decodeJSON(body, &b, true); e != nil {
		return acquireParams{}, e
	}
	if err := dlock.ValidName(name); err != nil {
		return acquireParams{}, lockError(context.Background(), name, err)
	}
	p := acquireParams{req: dlock.Request{Name: name, TTL: DefaultTTLMs * time.Millisecond}}
	if b.TTLMs != nil {
		if *b.TTLMs < MinTTLMs || *b.TTLMs > MaxTTLMs {
			return p, badField("ttlMs", fmt.Sprintf("must be from %d to %d", MinTTLMs, MaxTTLMs))
		}
		p.req.TTL = time.Duration(*b.TTLMs) * time.Millisecond
	}
	if b.WaitMs != nil {
		if *b.WaitMs < 0 || *b.WaitMs > MaxWaitMs {
			return p, badField("waitMs", fmt.Sprintf("must be from 0 to %d", MaxWaitMs))
		}
		p.wait = time.Duration(*b.WaitMs) * time.Millisecond
	}
	if p.delay, e = msField("lockDelayMs", b.LockDelayMs, 0, MaxLockDelayMs); e != nil {
		return p, e
	}
	if p.maxHold, e = msField("maxHoldMs", b.MaxHoldMs, MinTTLMs, MaxHoldMs); e != nil {
		return p, e
	}
	if e = p.setMode(&b); e != nil {
		return p, e
	}
	if e = p.setRecord(&b); e != nil {
		return p, e
	}
	if e = p.setQueue(&b); e != nil {
		return p, e
	}
	mode := p.req.Mode
	// A waiting fair locker or writer keeps its place in the queue.
	if p.wait > 0 && (mode == dlock.ModeFair || mode == dlock.ModeWrite) {
		p.req.Queue = true
	}
	return p, nil
}

// setMode sets the mode of p from b, with the fields that go with it
// (fair, owner, limit). The owner is the hold's recorded owner in every
// mode, and in reentrant mode also who re-enters.
func (p *acquireParams) setMode(b *acquireBody) *apiError {
	mode, e := parseMode(b.Mode, b.Fair, b.Owner != "", b.Limit != nil)
	if e != nil {
		return e
	}
	p.req.Mode = mode
	if b.Fair && mode != dlock.ModeFair {
		return badField("fair", "applies to exclusive locks only")
	}
	if b.Owner != "" {
		if e := validText("owner", b.Owner); e != nil {
			return e
		}
		p.req.Holder = b.Owner
		if mode == dlock.ModeReentrant {
			p.req.Owner = b.Owner
		}
	}
	if b.Limit != nil {
		if mode != dlock.ModeSemaphore {
			return badField("limit", "applies to semaphores only")
		}
		if *b.Limit < 1 || *b.Limit > maxLimit {
			return badField("limit", fmt.Sprintf("must be from 1 to %d", maxLimit))
		}
		p.req.Limit = int(*b.Limit)
	} else if mode == dlock.ModeSemaphore {
		return badField("limit", "is required for a semaphore")
	}
	return nil
}

// minHoldMode reports whether a minimum hold (store.Request.MinHold)
// applies to m: the exclusive modes of /v1 acquire but the reentrant one.
func minHoldMode(m dlock.Mode) bool { return m == dlock.ModeMutex || m == dlock.ModeFair }

// setRecord sets what p's hold records besides its owner: data, and the
// minimum hold of an exclusive mode.
func (p *acquireParams) setRecord(b *acquireBody) *apiError {
	if b.Data != nil {
		if len(*b.Data) > store.MaxDataLen {
			return badField("data", fmt.Sprintf("must be at most %d bytes", store.MaxDataLen))
		}
		p.req.Data = *b.Data
	}
	minHold, e := msField("minHoldMs", b.MinHoldMs, 0, MaxHoldMs)
	if e != nil {
		return e
	}
	if minHold > 0 && !minHoldMode(p.req.Mode) {
		return badField("minHoldMs", "applies to mutex and fair locks only (mode "+modeName(p.req.Mode)+")")
	}
	if p.maxHold > 0 && minHold > p.maxHold {
		return badField("minHoldMs", "must not exceed maxHoldMs")
	}
	p.req.MinHold = minHold
	return nil
}

// setQueue sets p's token and queue place from b.
func (p *acquireParams) setQueue(b *acquireBody) *apiError {
	if b.Token != "" {
		if e := validToken(b.Token); e != nil {
			return e
		}
		p.req.Token = b.Token
	}
	if b.QueueTTLMs != nil && !b.Queue {
		return badField("queueTtlMs", "applies only with queue")
	}
	if b.Queue {
		if p.req.Mode != dlock.ModeFair && p.req.Mode != dlock.ModeWrite {
			return badField("queue", "applies to fair and write locks only")
		}
		// A place kept after the answer is refreshed, claimed and given up
		// with its token: without one it would be nobody's.
		if b.Token == "" {
			return badField("token", "is required with queue: the queue place is refreshed, claimed and released with it")
		}
		p.req.Queue = true
		if b.QueueTTLMs != nil {
			if *b.QueueTTLMs < MinTTLMs || *b.QueueTTLMs > MaxTTLMs {
				return badField("queueTtlMs", fmt.Sprintf("must be from %d to %d", MinTTLMs, MaxTTLMs))
			}
			p.req.QueueTTL = time.Duration(*b.QueueTTLMs) * time.Millisecond
		}
	}
	return nil
}

// parseMode maps the API's mode to a dlock.Mode: "exclusive" (the default)
// is the mutex, or the fair lock with fair, or else the reentrant lock with
// an owner; "shared" is the read side of a read-write lock, or a semaphore
// with a limit; the dlock mode names are accepted as they are.
func parseMode(s string, fair, owner, limit bool) (dlock.Mode, *apiError) {
	switch s {
	case "", "exclusive":
		switch {
		case fair:
			return dlock.ModeFair, nil
		case owner:
			return dlock.ModeReentrant, nil
		}
		return dlock.ModeMutex, nil
	case "shared":
		if limit {
			return dlock.ModeSemaphore, nil
		}
		return dlock.ModeRead, nil
	}
	if m, ok := dlock.ParseMode(s); ok && m != dlock.ModeElection { // elections: /v1/elections
		return m, nil
	}
	return 0, badField("mode", "must be exclusive, shared, mutex, reentrant, read, write, fair or semaphore")
}

// MaxTokenBytes is the longest token extend and release accept; a longer
// one is a 400. A token of any other shape that the server never grants
// (see validToken) does not hold the lock: 410.
const MaxTokenBytes = 256

// leaseKey identifies a /v1 lease: tokens are per lease, but a client may
// (unwisely) use one token on several names.
type leaseKey struct{ name, token string }

// leaseTable holds the leases granted through /v1, so that extend and
// release act on the Lease (keeping its local validity and metrics right).
// Ended leases are swept out as the table grows.
type leaseTable struct {
	mu        sync.Mutex
	m         map[leaseKey]*leaseEntry
	sweepSize int
}

// leaseEntry serialises the requests of one token: a retried acquire
// waits for the first to finish, then finds its lease.
type leaseEntry struct {
	mu    sync.Mutex
	lease *dlock.Lease // nil until granted
	// holdEnd is when the token's lease reaches its maxHoldMs, by this
	// server's clock (counted from before its acquire); zero without one.
	// It outlives the lease when this server counts the lease lost, so
	// that the extends and acquires that the store then decides are capped
	// too.
	holdEnd time.Time
}

// holdLeft returns what is left of e's max hold (0: none), or the 410 of a
// lease on name that reached it. Caller holds e.mu.
func (e *leaseEntry) holdLeft(name string) (time.Duration, *apiError) {
	if e.holdEnd.IsZero() {
		return 0, nil
	}
	left := time.Until(e.holdEnd).Truncate(time.Millisecond)
	if left < dlock.MinTTL {
		return 0, lockError(context.Background(), name, dlock.ErrMaxHold)
	}
	return left, nil
}

// forget drops e from t once its lease ended, unless a max hold must
// still cap what the token gets. Caller holds e.mu.
func (t *leaseTable) forget(k leaseKey, e *leaseEntry) {
	e.lease = nil
	if e.holdEnd.IsZero() || time.Now().After(e.holdEnd) {
		t.remove(k, e)
	}
}

func (t *leaseTable) entry(k leaseKey) *leaseEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[leaseKey]*leaseEntry)
	}
	e := t.m[k]
	if e == nil {
		e = &leaseEntry{}
		t.m[k] = e
		if len(t.m) >= max(2*t.sweepSize, 64) {
			t.sweepLocked()
		}
	}
	return e
}

func (t *leaseTable) lookup(k leaseKey) *leaseEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[k]
}

func (t *leaseTable) remove(k leaseKey, e *leaseEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[k] == e {
		delete(t.m, k)
	}
}

// sweepLocked drops entries whose lease ended. Entries without a lease yet
// are being acquired (the acquire removes them if it fails). Caller holds
// t.mu.
func (t *leaseTable) sweepLocked() {
	now := time.Now()
	for k, e := range t.m {
		if !e.mu.TryLock() {
			continue
		}
		if (e.lease != nil && ended(e.lease) || e.lease == nil && !e.holdEnd.IsZero()) && !now.Before(e.holdEnd) {
			delete(t.m, k)
		}
		e.mu.Unlock()
	}
	t.sweepSize = len(t.m)
}

func (t *leaseTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

func ended(ls *dlock.Lease) bool {
	select {
	case <-ls.Done():
		return true
	default:
		return false
	}
}

// testHookWaiting, when set by a test, is called as a /v1 acquire starts
// to wait.
var testHookWaiting func(name string)

func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p, e := s.acquireParams(r)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	if p.wait > 0 {
		extendWriteDeadline(w, p.wait)
	}
	ctx, cancel := s.waitContext(r.Context(), p.wait)
	defer cancel()

	var entry *leaseEntry
	var key leaseKey
	if p.req.Token != "" {
		key = leaseKey{name, p.req.Token}
		entry = s.leases.entry(key)
		entry.mu.Lock()
		defer entry.mu.Unlock()
		if done := retryAcquire(ctx, w, entry, &p); done {
			return
		}
	}

	if p.wait > 0 && testHookWaiting != nil {
		testHookWaiting(name)
	}
	claim, e := s.reserveHold(r.Context())
	if e != nil {
		if entry != nil && entry.lease == nil && entry.holdEnd.IsZero() {
			s.leases.remove(key, entry)
		}
		writeAPIError(w, e)
		return
	}
	asked := time.Now()
	p.req.MaxHold = lockerMaxHold(p.maxHold) // kept with the hold on the store: every instance caps alike
	ls, err := s.v1.Acquire(ctx, p.req, p.wait > 0, dlock.WithLockDelay(p.delay))
	claim(ls)
	if err != nil {
		if entry != nil && entry.lease == nil && entry.holdEnd.IsZero() {
			s.leases.remove(key, entry)
		}
		writeAPIError(w, lockError(ctx, name, err))
		return
	}
	if entry == nil {
		key = leaseKey{name, ls.Token()}
		entry = s.leases.entry(key)
		entry.mu.Lock()
		defer entry.mu.Unlock()
	}
	entry.lease = ls
	if p.maxHold > 0 && entry.holdEnd.IsZero() {
		entry.holdEnd = asked.Add(p.maxHold)
	}
	s.rep.Granted(key.name, key.token)
	ttl := p.req.TTL
	if p.maxHold > 0 {
		ttl = min(ttl, p.maxHold) // what the store was asked for
	}
	writeGrant(w, name, ls, ttl)
}

// acquireParams reads the acquire r asks for, with what the store can
// keep of it and its holder (the caller's by default).
func (s *Server) acquireParams(r *http.Request) (acquireParams, *apiError) {
	p, e := decodeAcquire(r.PathValue("name"), r.Body)
	if e == nil {
		e = s.lockDelayError(p.delay)
	}
	if e == nil {
		e = s.minHoldError(p.req.MinHold)
	}
	if p.req.Holder == "" {
		p.req.Holder = defaultHolder(r)
	}
	return p, e
}

// lockerMaxHold is the max hold to ask the /v1 Locker for so that the
// bound it records with the hold on the store (the lease's max hold plus
// its drift margin, see dlock.WithMaxHold) is maxHold: every instance then
// caps a lease at maxHold from its grant, by the store's clock, and the
// granting instance's own Lease ends a drift margin before. 0 is none.
func lockerMaxHold(maxHold time.Duration) time.Duration {
	if maxHold <= 0 {
		return 0
	}
	return max(time.Duration(float64(maxHold-2*time.Millisecond)/(1+leaseDriftFactor)), dlock.MinTTL)
}

// defaultHolder names the owner of a hold whose acquire names none: the
// authenticated credential ("<tenant>/<name>", see auth.Principal.Holder),
// else the client's address.
func defaultHolder(r *http.Request) string {
	if p := auth.FromContext(r.Context()); p != nil {
		return p.Holder(r.RemoteAddr)
	}
	return r.RemoteAddr
}

// retryAcquire answers an acquire that names a token this server granted
// (entry, locked by the caller): while the lease is held, the retry
// refreshes its TTL, as the store contract says, and is answered here
// (done). Otherwise the acquire goes on, its max hold counted from the
// token's first grant.
func retryAcquire(ctx context.Context, w http.ResponseWriter, entry *leaseEntry, p *acquireParams) (done bool) {
	name := p.req.Name
	if ls := entry.lease; ls != nil {
		if ls.Mode() != p.req.Mode {
			writeAPIError(w, badField("token", "already holds this lock in mode "+modeName(ls.Mode())))
			return true
		}
		err := ls.Extend(ctx, p.req.TTL)
		if err == nil {
			writeGrant(w, name, ls, min(p.req.TTL, ls.TTL()))
			return true
		}
		if !errors.Is(err, dlock.ErrLeaseLost) && !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrMaxHold) {
			// At its max hold the token gets no new grant either.
			writeAPIError(w, lockError(ctx, name, err))
			return true
		}
		entry.lease = nil // lost meanwhile: acquire anew
	}
	left, e := entry.holdLeft(name)
	if e != nil {
		writeAPIError(w, e)
		return true
	}
	if left > 0 {
		p.maxHold = left
	}
	return false
}

func writeGrant(w http.ResponseWriter, name string, ls *dlock.Lease, ttl time.Duration) {
	writeOK(w, &grantBody{Name: name, Token: ls.Token(), Fence: ls.Fence(), TTLMs: ttl.Milliseconds(), Mode: modeName(ls.Mode()), Count: ls.Count()})
}

// waitContext returns ctx limited to wait and cancelled with
// errShuttingDown when the server begins to shut down. Without a wait it
// returns ctx: one attempt ends by itself, and shutdown waits for it.
func (s *Server) waitContext(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	if wait <= 0 {
		return ctx, func() {}
	}
	cctx, cancelCause := context.WithCancelCause(ctx)
	// s.life.drainCtx is a cancelCtx: AfterFunc registers with it, no goroutine.
	stop := context.AfterFunc(s.life.drainCtx, func() { cancelCause(errShuttingDown) })
	out, cancelTimeout := context.WithTimeout(cctx, wait)
	return out, func() {
		stop()
		cancelTimeout()
		cancelCause(context.Canceled)
	}
}

// extendWriteDeadline gives a response that legitimately takes d more time
// to start (a wait for a lock, a demo operation) a write deadline past it.
func extendWriteDeadline(w http.ResponseWriter, d time.Duration) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d + 30*time.Second))
}

// tokenBody is the body of extend and release. Mode is needed only when
// the server does not know the lease (it restarted, or another instance
// granted it) and the lease is not a mutex.
type tokenBody struct {
	Token *string `json:"token"`
	TTLMs *int64  `json:"ttlMs"`
	Mode  string  `json:"mode"`
}

func decodeToken(r *http.Request, withTTL bool) (tokenBody, dlock.Mode, *apiError) {
	var b tokenBody
	if e := decodeJSON(r.Body, &b, false); e != nil {
		return b, 0, e
	}
	if err := dlock.ValidName(r.PathValue("name")); err != nil {
		return b, 0, lockError(context.Background(), r.PathValue("name"), err)
	}
	if b.Token == nil {
		return b, 0, badField("token", "is required")
	}
	if len(*b.Token) > MaxTokenBytes {
		return b, 0, badField("token", fmt.Sprintf("must be at most %d bytes", MaxTokenBytes))
	}
	if validToken(*b.Token) != nil {
		// No lease was ever granted to a token of this shape: whatever it
		// is, it does not hold the lock.
		return b, 0, lockError(context.Background(), r.PathValue("name"), dlock.ErrNotHeld)
	}
	if b.TTLMs != nil {
		if !withTTL {
			return b, 0, &apiError{Status: http.StatusBadRequest, Error: "unknown field", Field: "ttlMs", Message: `unknown field "ttlMs"`}
		}
		if *b.TTLMs < MinTTLMs || *b.TTLMs > MaxTTLMs {
			return b, 0, badField("ttlMs", fmt.Sprintf("must be from %d to %d", MinTTLMs, MaxTTLMs))
		}
	}
	mode := dlock.ModeMutex
	if b.Mode != "" {
		m, e := parseMode(b.Mode, false, false, false)
		if e != nil {
			return b, 0, e
		}
		mode = m
	}
	return b, mode, nil
}

func (s *Server) handleExtend(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	b, mode, e := decodeToken(r, true)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	ctx := r.Context()
	key := leaseKey{name, *b.Token}
	known := b.Mode != ""
	var holdLeft time.Duration // what the store may be asked for; 0: no max hold
	if entry := s.leases.lookup(key); entry != nil {
		entry.mu.Lock()
		defer entry.mu.Unlock()
		if ls := entry.lease; ls != nil {
			var ttl time.Duration
			if b.TTLMs != nil {
				ttl = time.Duration(*b.TTLMs) * time.Millisecond
			}
			err := ls.Extend(ctx, ttl)
			if err == nil {
				writeOK(w, &extendBody{Name: name, Fence: ls.Fence(), TTLMs: durationMs(ls.TTL())})
				return
			}
			// At its max hold, the store must not be asked either.
			if !errors.Is(err, dlock.ErrLeaseLost) && !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrMaxHold) {
				writeAPIError(w, lockError(ctx, name, err))
				return
			}
			// Lost by this server's count, which misses the extensions
			// made through other replicas: the store decides.
			s.leases.forget(key, entry)
			mode, known = ls.Mode(), true
		}
		if holdLeft, e = entry.holdLeft(name); e != nil {
			writeAPIError(w, e)
			return
		}
	}
	// Unknown here: the lease was granted before a restart or by another
	// instance. The store decides.
	ttl := DefaultTTLMs * time.Millisecond
	if b.TTLMs != nil {
		ttl = time.Duration(*b.TTLMs) * time.Millisecond
	}
	if holdLeft > 0 {
		ttl = min(ttl, holdLeft)
	}
	sent := time.Now()
	var g store.Grant
	mode, err := s.byToken(ctx, dlock.Request{Name: name, Token: *b.Token, TTL: ttl, Mode: mode}, known, func(req dlock.Request) (err error) {
		g, err = s.resumeHold(ctx, req)
		return err
	})
	if err != nil {
		writeAPIError(w, lockError(ctx, name, err))
		return
	}
	s.servedElsewhere(name, *b.Token, mode, false)
	writeOK(w, &extendBody{Name: name, Fence: g.Fence, TTLMs: s.validMs(sent, g.TTL)})
}

// resumeHold extends req's hold on the store, for a lease this server does
// not know: a resume (store.Resumer), which confirms the token holds the
// name in req.Mode and caps the TTL by the max hold recorded with the hold,
// so every instance caps and refuses alike; the Grant says the hold's fence
// and the TTL it got. On a store without it (or one that reports it
// cannot, such as Redlock over nodes without it), a plain Extend (TTL as
// asked, fence 0).
func (s *Server) resumeHold(ctx context.Context, req dlock.Request) (store.Grant, error) {
	if rs, ok := s.locker.Store().(store.Resumer); ok {
		g, err := rs.Resume(ctx, req)
		if err == nil && g.TTL <= 0 {
			g.TTL = req.TTL
		}
		if !errors.Is(err, dlock.ErrNotSupported) { // a quorum over nodes that cannot: extend
			return g, err
		}
	}
	return store.Grant{TTL: req.TTL}, s.locker.Store().Extend(ctx, []dlock.Request{req})[0]
}

func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	b, mode, e := decodeToken(r, false)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	ctx := r.Context()
	key := leaseKey{name, *b.Token}
	known := b.Mode != ""
	if entry := s.leases.lookup(key); entry != nil {
		entry.mu.Lock()
		defer entry.mu.Unlock()
		if ls := entry.lease; ls != nil {
			err := ls.Release(ctx)
			if err == nil || errors.Is(err, dlock.ErrLeaseLost) || errors.Is(err, dlock.ErrNotHeld) {
				s.leases.remove(key, entry)
			}
			if err == nil {
				writeOK(w, &releaseBody{Name: name, Released: true})
				return
			}
			if !errors.Is(err, dlock.ErrLeaseLost) && !errors.Is(err, dlock.ErrNotHeld) {
				writeAPIError(w, lockError(ctx, name, err))
				return
			}
			// Lost by this server's count, which misses the extensions
			// made through other replicas: the store decides.
			mode, known = ls.Mode(), true
		}
	}
	mode, err := s.byToken(ctx, dlock.Request{Name: name, Token: *b.Token, Mode: mode}, known, func(req dlock.Request) error {
		return s.locker.Store().Release(ctx, req)
	})
	if err != nil {
		writeAPIError(w, lockError(ctx, name, err))
		return
	}
	s.servedElsewhere(name, *b.Token, mode, true)
	writeOK(w, &releaseBody{Name: name, Released: true})
}

// stateBody describes a lock; it never carries tokens.
type stateBody struct {
	Name    string      `json:"name"`
	Mode    string      `json:"mode"`
	Held    bool        `json:"held"`
	Holders int         `json:"holders"`
	TTLMs   int64       `json:"ttlMs"`
	Fence   int64       `json:"fence"`
	Queue   int         `json:"queue"`
	Limit   int         `json:"limit,omitempty"`
	Owners  []ownerBody `json:"owners"`
}

// ownerBody describes one hold of a lock (store.Holder): who holds it,
// since when by the store's clock (unix ms) and for how long by the
// server's, and the caller's data. An unknown owner is "", without since
// and with age 0.
type ownerBody struct {
	Owner string `json:"owner"`
	Since int64  `json:"since,omitempty"`
	AgeMs int64  `json:"ageMs"`
	Data  string `json:"data,omitempty"`
	Fence int64  `json:"fence,omitempty"`
}

func toOwners(hs []store.Holder, now time.Time) []ownerBody {
	out := make([]ownerBody, len(hs))
	for i, h := range hs {
		out[i] = ownerBody{Owner: h.Owner, Data: h.Data, Fence: h.Fence}
		if !h.Since.IsZero() {
			out[i].Since = h.Since.UnixMilli()
			out[i].AgeMs = max(now.Sub(h.Since).Milliseconds(), 0)
		}
	}
	return out
}

func toState(st store.State) stateBody {
	return stateBody{Name: st.Name, Mode: modeName(st.Mode), Held: st.Holders > 0, Holders: st.Holders,
		TTLMs: durationMs(st.TTL), Fence: st.Fence, Queue: st.Queue, Limit: st.Limit,
		Owners: toOwners(st.Owners, time.Now())}
}

func (s *Server) inspector(w http.ResponseWriter) (store.Inspector, bool) {
	in, ok := s.locker.Store().(store.Inspector)
	if !ok {
		writeError(w, http.StatusNotImplemented, "not supported", "the store cannot list or describe its locks")
	}
	return in, ok
}

func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := dlock.ValidName(name); err != nil {
		writeAPIError(w, lockError(r.Context(), name, err))
		return
	}
	in, ok := s.inspector(w)
	if !ok {
		return
	}
	st, err := in.State(r.Context(), name)
	if err != nil {
		writeAPIError(w, lockError(r.Context(), name, &dlock.StoreError{Op: "state", Node: -1, Err: err}))
		return
	}
	st.Name = name
	writeJSON(w, http.StatusOK, toState(st))
}

// maxList bounds the locks returned by list and sent in snapshots.
const maxList = 1000

type listBody struct {
	Locks     []stateBody `json:"locks"`
	Truncated bool        `json:"truncated,omitempty"`
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	in, ok := s.inspector(w)
	if !ok {
		return
	}
	lb, err := s.list(r.Context(), in)
	if err != nil {
		writeAPIError(w, lockError(r.Context(), "", &dlock.StoreError{Op: "list", Node: -1, Err: err}))
		return
	}
	writeJSON(w, http.StatusOK, lb)
}

func (s *Server) list(ctx context.Context, in store.Inspector) (listBody, error) {
	states, err := in.List(ctx)
	if err != nil {
		return listBody{}, err
	}
	return filterList(ctx, states), nil
}

// filterList returns the states the principal of ctx may see, at most
// maxList of them.
func filterList(ctx context.Context, states []store.State) listBody {
	lb := listBody{Locks: make([]stateBody, 0, min(len(states), maxList))}
	p := auth.FromContext(ctx) // a scoped token sees only names in scope
	for _, st := range states {
		if !p.Allows(st.Name) {
			continue
		}
		if len(lb.Locks) == maxList {
			lb.Truncated = true
			break
		}
		lb.Locks = append(lb.Locks, toState(st))
	}
	return lb
}

// leaseDriftFactor is the [dlock.WithDriftFactor] of the /v1 leases.
const leaseDriftFactor = 0.01

// validMs is the ttlMs a /v1 answer gives for a hold of ttl whose request
// was sent to the store at sent: the validity a Lease counts for it, by
// the formula of [dlock.WithDriftFactor] (TTL - elapsed - (factor*TTL +
// 2ms)) with the larger margin of a [store.Drifter] store. An instance
// that passes an extend of a lease it does not know to the store answers
// with it, so it answers as the instance that granted the lease does
// (Lease.TTL, by the same formula).
func (s *Server) validMs(sent time.Time, ttl time.Duration) int64 {
	drift := time.Duration(float64(ttl)*leaseDriftFactor) + 2*time.Millisecond
	if dr, ok := s.v1.Store().(store.Drifter); ok {
		drift = max(drift, dr.Drift(ttl))
	}
	return durationMs(time.Until(sent.Add(ttl - drift)))
}

// detach stops tracking the lease of token on name, which a client
// extended or released through another replica: the local Lease is
// forgotten, without touching the store and without an event.
func (s *Server) detach(name, token string) {
	key := leaseKey{name, token}
	e := s.leases.lookup(key)
	if e == nil || !e.mu.TryLock() {
		return // busy with a request of its client: that one decides
	}
	defer e.mu.Unlock()
	if ls := e.lease; ls != nil && !ended(ls) {
		s.streams.quiet.silence(key.name, ls.Fence())
		if ls.Forget() != nil {
			s.streams.quiet.unsilence(key.name, ls.Fence())
		}
	}
	s.leases.remove(key, e)
}

// byToken runs op, an extend or release of req (name and token) on the
// store, in the lease's mode: req.Mode when known (the body named it, or
// this server granted the lease); else the mutex first and, when the mutex
// is not held by the token, the mode holding the name and then the queue
// places (fair, write) when it has waiters. A token holds a name in one
// mode only, so asking in another mode changes nothing. A semaphore
// request carries the name's limit, read from its state. It returns the
// mode that worked.
func (s *Server) byToken(ctx context.Context, req dlock.Request, known bool, op func(dlock.Request) error) (dlock.Mode, error) {
	in, inspect := s.locker.Store().(store.Inspector)
	var st store.State
	var stateErr error
	stated := false
	state := func() (store.State, error) {
		if !stated && inspect {
			st, stateErr = in.State(ctx, req.Name)
			stated = true
		}
		return st, stateErr
	}
	run := func(m dlock.Mode) error {
		r := req
		r.Mode = m
		if m == dlock.ModeSemaphore {
			if st, err := state(); err == nil && st.Limit > 0 {
				r.Limit = st.Limit
			}
		}
		return op(r)
	}
	if known {
		return req.Mode, run(req.Mode)
	}
	err := run(dlock.ModeMutex)
	if !errors.Is(err, dlock.ErrNotHeld) || !inspect {
		return dlock.ModeMutex, err
	}
	st, serr := state()
	if serr != nil {
		return dlock.ModeMutex, err
	}
	tried := map[dlock.Mode]bool{dlock.ModeMutex: true}
	var try []dlock.Mode
	if st.Holders > 0 {
		try = append(try, st.Mode)
	}
	if st.Queue > 0 {
		try = append(try, dlock.ModeFair, dlock.ModeWrite)
	}
	for _, m := range try {
		if tried[m] {
			continue
		}
		tried[m] = true
		if err = run(m); !errors.Is(err, dlock.ErrNotHeld) {
			return m, err
		}
	}
	return dlock.ModeMutex, err
}

// servedElsewhere reports that this server extended or released the lease
// of token on name through the store: the instance that granted it stops
// tracking it. A release is also reported as an event.
func (s *Server) servedElsewhere(name, token string, mode dlock.Mode, released bool) {
	if released {
		s.emit(eventBody{Type: "release", Name: name, Mode: modeName(mode), Time: time.Now().UnixMilli(), Replica: s.rep.ID()}, true)
	}
	s.rep.Served(name, token)
}
