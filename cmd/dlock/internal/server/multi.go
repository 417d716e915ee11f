package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// The multi-lock API: POST /v1/multi/acquire, extend and release. A
// multi-lock is one dlock.MultiLease: a mutex hold of every name, all with
// one token, kept in the multi table by token.

// multiBody is the JSON body of POST /v1/multi/acquire.
type multiBody struct {
	Names       []string `json:"names"`
	TTLMs       *int64   `json:"ttlMs"`
	WaitMs      *int64   `json:"waitMs"`
	LockDelayMs *int64   `json:"lockDelayMs"`
}

// multiGrantBody is the 200 answer to a multi-lock acquire.
type multiGrantBody struct {
	Token  string           `json:"token"`
	Fences map[string]int64 `json:"fences"`
	TTLMs  int64            `json:"ttlMs"`
}

// multiTokenBody is the body of multi-lock extend and release.
type multiTokenBody struct {
	Token *string  `json:"token"`
	Names []string `json:"names"`
	TTLMs *int64   `json:"ttlMs"`
}

// multiTable holds the multi-locks granted through /v1, by token. Ended
// ones are swept out as the table grows.
type multiTable struct {
	mu        sync.Mutex
	m         map[string]*dlock.MultiLease
	sweepSize int
}

func (t *multiTable) put(ml *dlock.MultiLease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[string]*dlock.MultiLease)
	}
	t.m[ml.Token()] = ml
	if len(t.m) >= max(2*t.sweepSize, 64) {
		for k, v := range t.m {
			select {
			case <-v.Done():
				delete(t.m, k)
			default:
			}
		}
		t.sweepSize = len(t.m)
	}
}

func (t *multiTable) get(token string) *dlock.MultiLease {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[token]
}

func (t *multiTable) remove(token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, token)
}

// validNames checks the names of a multi-lock: 1 to 64 valid names.
func validNames(names []string) *apiError {
	if len(names) == 0 || len(names) > dlock.MaxMultiNames {
		return badField("names", fmt.Sprintf("must hold 1 to %d names", dlock.MaxMultiNames))
	}
	for _, n := range names {
		if err := dlock.ValidName(n); err != nil {
			return badField("names", "must hold valid lock names: "+err.Error())
		}
	}
	return nil
}

func (s *Server) handleMultiAcquire(w http.ResponseWriter, r *http.Request) {
	var b multiBody
	if e := decodeJSON(r.Body, &b, false); e != nil {
		writeAPIError(w, e)
		return
	}
	if e := validNames(b.Names); e != nil {
		writeAPIError(w, e)
		return
	}
	ttl, wait, delay, e := s.holdTimes(b.TTLMs, b.WaitMs, b.LockDelayMs)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	if wait > 0 {
		extendWriteDeadline(w, wait)
	}
	ctx, cancel := s.waitContext(r.Context(), wait)
	defer cancel()
	// Each name is a hold of the token (maxHolds); the request is one
	// acquire (acquiresPerSecond, counted by guard).
	claim, e := s.reserveHolds(r.Context(), len(slices.Compact(slices.Sorted(slices.Values(b.Names)))))
	if e != nil {
		writeAPIError(w, e)
		return
	}
	m := s.v1.Multi(b.Names, dlock.WithTTL(ttl), dlock.WithLockDelay(delay), dlock.WithHolder(defaultHolder(r)))
	var ml *dlock.MultiLease
	var err error
	if wait > 0 {
		ml, err = m.Lock(ctx)
	} else {
		ml, err = m.TryLock(ctx)
	}
	if ml != nil {
		claim(ml.Done())
	} else {
		claim(nil)
	}
	if err != nil {
		var locked *dlock.LockedError
		if errors.As(err, &locked) {
			e := lockError(ctx, locked.Name, err)
			e.Name = locked.Name
			writeAPIError(w, e)
			return
		}
		writeAPIError(w, lockError(ctx, strings.Join(b.Names, ", "), err))
		return
	}
	s.multi.put(ml)
	writeJSON(w, http.StatusOK, multiGrantBody{Token: ml.Token(), Fences: ml.Fences(), TTLMs: ttl.Milliseconds()})
}

// decodeMultiToken reads the body of extend and release: the token, the
// names it was granted (checked against the lock's when the server knows
// it) and, for extend, an optional ttlMs.
func decodeMultiToken(r *http.Request, withTTL bool) (multiTokenBody, *apiError) {
	var b multiTokenBody
	if e := decodeJSON(r.Body, &b, false); e != nil {
		return b, e
	}
	if b.Token == nil {
		return b, badField("token", "is required")
	}
	if len(*b.Token) > MaxTokenBytes {
		return b, badField("token", fmt.Sprintf("must be at most %d bytes", MaxTokenBytes))
	}
	if e := validNames(b.Names); e != nil {
		return b, e
	}
	if b.TTLMs != nil && !withTTL {
		return b, &apiError{Status: http.StatusBadRequest, Error: "unknown field", Field: "ttlMs", Message: `unknown field "ttlMs"`}
	}
	if _, e := msField("ttlMs", b.TTLMs, MinTTLMs, MaxTTLMs); e != nil {
		return b, e
	}
	b.Names = slices.Compact(slices.Sorted(slices.Values(b.Names)))
	return b, nil
}

// multiLease returns the multi-lock of b.Token when the server knows it and
// its names are b.Names.
func (s *Server) multiLease(b multiTokenBody) *dlock.MultiLease {
	if validToken(*b.Token) != nil {
		return nil
	}
	ml := s.multi.get(*b.Token)
	if ml == nil || !slices.Equal(ml.Names(), b.Names) {
		return nil
	}
	return ml
}

type multiExtendBody struct {
	Names []string `json:"names"`
	TTLMs int64    `json:"ttlMs"`
}

func (s *Server) handleMultiExtend(w http.ResponseWriter, r *http.Request) {
	b, e := decodeMultiToken(r, true)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	ctx := r.Context()
	var ttl time.Duration
	if b.TTLMs != nil {
		ttl = time.Duration(*b.TTLMs) * time.Millisecond
	}
	if validToken(*b.Token) != nil {
		writeAPIError(w, lockError(ctx, strings.Join(b.Names, ", "), dlock.ErrNotHeld))
		return
	}
	if ml := s.multiLease(b); ml != nil {
		if err := ml.Extend(ctx, ttl); err != nil {
			if errors.Is(err, dlock.ErrLeaseLost) || errors.Is(err, dlock.ErrNotHeld) {
				s.multi.remove(*b.Token)
			}
			writeAPIError(w, lockError(ctx, strings.Join(b.Names, ", "), err))
			return
		}
		writeJSON(w, http.StatusOK, multiExtendBody{Names: b.Names, TTLMs: durationMs(ml.TTL())})
		return
	}
	// Unknown here (a restart, another instance): the store decides, name
	// by name, in one batch.
	if ttl == 0 {
		ttl = DefaultTTLMs * time.Millisecond
	}
	reqs := make([]dlock.Request, len(b.Names))
	for i, n := range b.Names {
		reqs[i] = dlock.Request{Name: n, Token: *b.Token, TTL: ttl, Mode: dlock.ModeMutex}
	}
	sent := time.Now()
	for i, err := range s.locker.Store().Extend(ctx, reqs) {
		if err != nil {
			writeAPIError(w, lockError(ctx, b.Names[i], err))
			return
		}
	}
	writeJSON(w, http.StatusOK, multiExtendBody{Names: b.Names, TTLMs: s.validMs(sent, ttl)})
}

type multiReleaseBody struct {
	Names    []string `json:"names"`
	Released bool     `json:"released"`
}

func (s *Server) handleMultiRelease(w http.ResponseWriter, r *http.Request) {
	b, e := decodeMultiToken(r, false)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	ctx := r.Context()
	if validToken(*b.Token) != nil {
		writeAPIError(w, lockError(ctx, strings.Join(b.Names, ", "), dlock.ErrNotHeld))
		return
	}
	if ml := s.multiLease(b); ml != nil {
		s.multi.remove(*b.Token)
		if err := ml.Release(ctx); err != nil {
			writeAPIError(w, lockError(ctx, strings.Join(b.Names, ", "), err))
			return
		}
		writeJSON(w, http.StatusOK, multiReleaseBody{Names: b.Names, Released: true})
		return
	}
	// Unknown here: release every name the token holds; 410 when it held
	// none of them.
	var held bool
	var failed error
	for _, n := range b.Names {
		err := s.locker.Store().Release(ctx, dlock.Request{Name: n, Token: *b.Token, Mode: dlock.ModeMutex})
		switch {
		case err == nil:
			held = true
		case !errors.Is(err, dlock.ErrNotHeld) && failed == nil:
			failed = err
		}
	}
	switch {
	case failed != nil:
		writeAPIError(w, lockError(ctx, strings.Join(b.Names, ", "), failed))
	case !held:
		writeAPIError(w, lockError(ctx, strings.Join(b.Names, ", "), dlock.ErrNotHeld))
	default:
		writeJSON(w, http.StatusOK, multiReleaseBody{Names: b.Names, Released: true})
	}
}
