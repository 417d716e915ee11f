package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server/auth"
	"github.com/dlock-dev/dlock/store"
)

// The election API: /v1/elections/{name}/campaign, resign, extend, the
// leader (GET /v1/elections/{name}) and its changes as server-sent events
// (GET /v1/elections/{name}/observe). A leadership is a /v1 lease in
// dlock.ModeElection: kept in the lease table, extended by its client.

// campaignBody is the JSON body of POST /v1/elections/{name}/campaign.
type campaignBody struct {
	Value       *string `json:"value"`
	TTLMs       *int64  `json:"ttlMs"`
	WaitMs      *int64  `json:"waitMs"`
	LockDelayMs *int64  `json:"lockDelayMs"`
}

// leadBody is the 200 answer to a campaign.
type leadBody struct {
	Name  string `json:"name"`
	Token string `json:"token"`
	Term  int64  `json:"term"`
	Value string `json:"value"`
	TTLMs int64  `json:"ttlMs"`
}

// leaderBody describes a leader; it never carries the token.
type leaderBody struct {
	Value string `json:"value"`
	Term  int64  `json:"term"`
	TTLMs int64  `json:"ttlMs"`
}

// electionBody is the answer of GET /v1/elections/{name} and each event of
// its observe stream. Leader is null when nobody leads.
type electionBody struct {
	Name   string      `json:"name"`
	Leader *leaderBody `json:"leader"`
}

func toElection(name string, ld dlock.Leader) electionBody {
	if ld.Term == 0 {
		return electionBody{Name: name}
	}
	return electionBody{Name: name, Leader: &leaderBody{Value: ld.Value, Term: ld.Term, TTLMs: durationMs(ld.TTL)}}
}

func (s *Server) handleCampaign(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var b campaignBody
	if e := decodeJSON(r.Body, &b, false); e != nil {
		writeAPIError(w, e)
		return
	}
	if err := dlock.ValidName(name); err != nil {
		writeAPIError(w, lockError(context.Background(), name, err))
		return
	}
	switch {
	case b.Value == nil:
		writeAPIError(w, badField("value", "is required"))
		return
	case len(*b.Value) > dlock.MaxValueLen:
		writeAPIError(w, badField("value", fmt.Sprintf("must be at most %d bytes", dlock.MaxValueLen)))
		return
	case !utf8.ValidString(*b.Value):
		writeAPIError(w, badField("value", "must be valid UTF-8"))
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
	claim, e := s.reserveHold(r.Context()) // a leadership is a hold
	if e != nil {
		writeAPIError(w, e)
		return
	}
	req := dlock.Request{Name: name, Mode: dlock.ModeElection, Value: *b.Value, TTL: ttl, Holder: defaultHolder(r)}
	ls, err := s.v1.Acquire(ctx, req, wait > 0, dlock.WithLockDelay(delay))
	claim(ls)
	if err != nil {
		writeAPIError(w, lockError(ctx, name, err))
		return
	}
	key := leaseKey{name, ls.Token()}
	entry := s.leases.entry(key)
	entry.mu.Lock()
	entry.lease = ls
	entry.mu.Unlock()
	writeJSON(w, http.StatusOK, leadBody{Name: name, Token: ls.Token(), Term: ls.Fence(), Value: *b.Value, TTLMs: ttl.Milliseconds()})
}

// electionToken decodes the body of resign and extend: the token, and for
// extend an optional ttlMs.
func electionToken(r *http.Request, withTTL bool) (string, time.Duration, *apiError) {
	var b tokenBody
	if e := decodeJSON(r.Body, &b, false); e != nil {
		return "", 0, e
	}
	name := r.PathValue("name")
	if err := dlock.ValidName(name); err != nil {
		return "", 0, lockError(context.Background(), name, err)
	}
	if b.Mode != "" {
		return "", 0, &apiError{Status: http.StatusBadRequest, Error: "unknown field", Field: "mode", Message: `unknown field "mode"`}
	}
	if b.Token == nil {
		return "", 0, badField("token", "is required")
	}
	if len(*b.Token) > MaxTokenBytes {
		return "", 0, badField("token", fmt.Sprintf("must be at most %d bytes", MaxTokenBytes))
	}
	if validToken(*b.Token) != nil {
		return "", 0, lockError(context.Background(), name, dlock.ErrNotHeld)
	}
	if b.TTLMs != nil && !withTTL {
		return "", 0, &apiError{Status: http.StatusBadRequest, Error: "unknown field", Field: "ttlMs", Message: `unknown field "ttlMs"`}
	}
	ttl, e := msField("ttlMs", b.TTLMs, MinTTLMs, MaxTTLMs)
	return *b.Token, ttl, e
}

// termBody is the 200 answer to an election extend.
type termBody struct {
	Name  string `json:"name"`
	Term  int64  `json:"term,omitempty"`
	TTLMs int64  `json:"ttlMs"`
}

func (s *Server) handleElectionExtend(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	token, ttl, e := electionToken(r, true)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	ctx := r.Context()
	key := leaseKey{name, token}
	if entry := s.leases.lookup(key); entry != nil {
		entry.mu.Lock()
		defer entry.mu.Unlock()
		if ls := entry.lease; ls != nil && ls.Mode() == dlock.ModeElection {
			if err := ls.Extend(ctx, ttl); err != nil {
				if errors.Is(err, dlock.ErrLeaseLost) || errors.Is(err, dlock.ErrNotHeld) {
					s.leases.remove(key, entry)
				}
				writeAPIError(w, lockError(ctx, name, err))
				return
			}
			writeJSON(w, http.StatusOK, termBody{Name: name, Term: ls.Fence(), TTLMs: durationMs(ls.TTL())})
			return
		}
	}
	// Unknown here (a restart, another instance): the store decides.
	if ttl == 0 {
		ttl = DefaultTTLMs * time.Millisecond
	}
	sent := time.Now()
	err := s.locker.Store().Extend(ctx, []dlock.Request{{Name: name, Token: token, TTL: ttl, Mode: dlock.ModeElection}})[0]
	if err != nil {
		writeAPIError(w, lockError(ctx, name, err))
		return
	}
	writeJSON(w, http.StatusOK, termBody{Name: name, TTLMs: s.validMs(sent, ttl)})
}

type resignBody struct {
	Name     string `json:"name"`
	Resigned bool   `json:"resigned"`
}

func (s *Server) handleResign(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	token, _, e := electionToken(r, false)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	ctx := r.Context()
	key := leaseKey{name, token}
	if entry := s.leases.lookup(key); entry != nil {
		entry.mu.Lock()
		defer entry.mu.Unlock()
		if ls := entry.lease; ls != nil && ls.Mode() == dlock.ModeElection {
			err := ls.Release(ctx)
			if err == nil || errors.Is(err, dlock.ErrLeaseLost) || errors.Is(err, dlock.ErrNotHeld) {
				s.leases.remove(key, entry)
			}
			if err != nil {
				writeAPIError(w, lockError(ctx, name, err))
				return
			}
			writeJSON(w, http.StatusOK, resignBody{Name: name, Resigned: true})
			return
		}
	}
	if err := s.locker.Store().Release(ctx, dlock.Request{Name: name, Token: token, Mode: dlock.ModeElection}); err != nil {
		writeAPIError(w, lockError(ctx, name, err))
		return
	}
	writeJSON(w, http.StatusOK, resignBody{Name: name, Resigned: true})
}

// election returns the Election of name on the server's Locker, or writes
// the error: 400 for a bad name or a store without elections.
func (s *Server) election(w http.ResponseWriter, r *http.Request) (*dlock.Election, string, bool) {
	name := r.PathValue("name")
	if err := dlock.ValidName(name); err != nil {
		writeAPIError(w, lockError(r.Context(), name, err))
		return nil, name, false
	}
	if _, ok := s.locker.Store().(store.Elector); !ok {
		writeAPIError(w, &apiError{Status: http.StatusBadRequest, Error: "not supported", Field: "mode",
			Message: "the store cannot provide this mode: elections"})
		return nil, name, false
	}
	return s.v1.Election(name), name, true
}

func (s *Server) handleLeader(w http.ResponseWriter, r *http.Request) {
	e, name, ok := s.election(w, r)
	if !ok {
		return
	}
	ld, err := e.Leader(r.Context())
	if err != nil && !errors.Is(err, dlock.ErrNoLeader) {
		writeAPIError(w, lockError(r.Context(), name, err))
		return
	}
	writeJSON(w, http.StatusOK, toElection(name, ld))
}

// handleObserve streams the leadership of an election as server-sent
// events, one "leader" event per change (the first is the leadership when
// the stream starts), until the client goes away or the server shuts down.
func (s *Server) handleObserve(w http.ResponseWriter, r *http.Request) {
	e, name, ok := s.election(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	changes := e.Observe(ctx)
	defer func() {
		cancel()
		for range changes { // wait for the observer to end
		}
	}()
	st, ok := s.openStream(w)
	if !ok {
		return
	}
	defer st.close()
	p := auth.FromContext(r.Context())
	var revokedC <-chan time.Time // a scoped token's stream ends when it leaves the auth file
	if p != nil {
		tick := time.NewTicker(s.cfg.SnapshotInterval)
		defer tick.Stop()
		revokedC = tick.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-revokedC:
			if s.revoked(p) {
				return
			}
		case <-s.life.drain:
			st.send("shutdown", map[string]string{"message": "server shutting down"})
			return
		case ld, ok := <-changes:
			if !ok {
				return
			}
			if !st.send("leader", toElection(name, ld)) {
				return
			}
		}
	}
}
