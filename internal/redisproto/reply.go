package redisproto

import (
	"crypto/sha1" //nolint:gosec // G505: SHA-1 names a waiter's token as the Lua scripts do (redis.sha1hex); an identifier, not a signature
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// Granted decodes the integer reply of an acquire script, a grant with that
// fence (see [Ops]).
func Granted(fence int64) (store.Grant, error) {
	if fence < 1 {
		return store.Grant{}, fmt.Errorf("dlock: acquire script replied fence %d", fence)
	}
	return store.Grant{Acquired: true, Fence: fence, Count: 1}, nil
}

// ParseGrant decodes the array reply of an acquire script (see [Ops]). A
// *store.LimitError has only Held filled in; the store adds Name and Asked.
func ParseGrant(v []int64) (store.Grant, error) {
	if len(v) < 3 {
		return store.Grant{}, fmt.Errorf("dlock: acquire script replied %v, want at least 3 integers", v)
	}
	if v[0] < 0 {
		err := replyError(v[0])
		if le, ok := err.(*store.LimitError); ok {
			le.Held = int(v[1])
		}
		return store.Grant{}, err
	}
	g := store.Grant{Acquired: v[0] == 1, Fence: v[1]}
	if g.Acquired {
		g.Count = 1
	} else if v[2] > 0 {
		g.RetryAfter = time.Duration(v[2]) * time.Millisecond
	}
	if len(v) > 3 && v[3] > 0 {
		g.Count = int(v[3])
	}
	if len(v) > 4 {
		g.Position = int(v[4])
	}
	if len(v) > 5 && !g.Acquired {
		g.Held = store.Mode(v[5])
	}
	return g, nil
}

// replyError maps the negative status of an acquire script to an error.
func replyError(code int64) error {
	switch code {
	case -1:
		return store.ErrUpgrade
	case -2:
		return &store.InvalidError{Field: "limit", Reason: "must be at least 1"}
	case -3:
		return &store.LimitError{} // the store fills it in
	}
	return fmt.Errorf("dlock: acquire script replied status %d", code)
}

// DecodeState fills st from the reply of StateScript: the Redis type of the
// main key, its holders, its PTTL in ms, the last fence and the mutex's
// registered waiters. pattern reports a main key that is free or holds
// another pattern's marker: st then needs PatternStateScript.
func DecodeState(st store.State, typ string, holders, pttl, fence, waiters int64) (_ store.State, pattern bool) {
	st.Fence = fence
	if typ == "none" || typ == "pattern" {
		return st, true
	}
	st.Holders = int(holders)
	if pttl > 0 {
		st.TTL = time.Duration(pttl) * time.Millisecond
	}
	if typ == "string" {
		st.Mode = store.ModeMutex
		st.Queue = int(waiters)
	}
	return st, false
}

// DecodePatternState fills st from the reply of PatternStateScript:
// {mode, holders, pttl, queue, limit, owners...} (see [DecodeOwners]).
func DecodePatternState(st store.State, v []Reply) (store.State, error) {
	if len(v) < 5 {
		return st, nil
	}
	var n [5]int64
	for i := range n {
		x, err := v[i].Int64()
		if err != nil {
			return st, err
		}
		n[i] = x
	}
	if n[0] == 0 {
		return st, nil
	}
	st.Mode = store.Mode(n[0])
	st.Holders = int(n[1])
	if n[2] > 0 {
		st.TTL = time.Duration(n[2]) * time.Millisecond
	}
	st.Queue = int(n[3])
	st.Limit = int(n[4])
	owners, err := DecodeOwners(v[5:])
	if err != nil {
		return st, err
	}
	return withOwners(st, owners), nil
}

// TokenID is what a handoff message names a waiter by: the hex SHA-1 of its
// token.
func TokenID(token string) string {
	sum := sha1.Sum([]byte(token)) //nolint:gosec // G401: must equal the scripts' redis.sha1hex(token)
	return hex.EncodeToString(sum[:])
}

// ParseHandoff decodes a handoff message, "<TokenID> <fence>", published
// on a store's handoff channel by a release that handed the lock over.
func ParseHandoff(msg string) (id string, fence int64, ok bool) {
	id, f, ok := strings.Cut(msg, " ")
	if !ok {
		return "", 0, false
	}
	fence, err := strconv.ParseInt(f, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return id, fence, true
}

// Transient reports whether a server error reply (its message) is a state
// that passes (loading, busy script, failover, resharding), so that callers
// should retry: it becomes a [*store.StoreError].
func Transient(msg string) bool {
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOREPLICAS", "MOVED", "ASK"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// NoScript reports whether a server error reply is NOSCRIPT: the server
// does not know the script's SHA, so it must be sent with EVAL.
func NoScript(msg string) bool { return strings.HasPrefix(msg, "NOSCRIPT") }
