package redisproto

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// The election (store.ModeElection): an exclusive hold of the name that
// keeps the leader's value beside it, the term being the grant's fence.
//
//	election   lock:<name> marker "dlock:election", {t}:election (hash: token, value, term), {t}:election:gate,
//	           {t}:hold (the hold's record)
//
// The gate, a string that expires with the hold, is the key that waiting
// candidates and observers watch: a grant writes it, a resignation deletes
// it and expiry removes it, and each of these pushes an invalidation.

func init() {
	modes[store.ModeElection] = &Ops{
		Acquire: joined("scripts/election_acquire.lua"),
		Extend:  joined("scripts/election_extend.lua"),
		Release: joined("scripts/election_release.lua"),
		Raise:   joined("scripts/election_raise_fence.lua"),
		Resume:  joined("scripts/election_resume.lua"),
		Force:   joined("scripts/election_force.lua"),
		keys:    electionKeys,
		args:    electionArgs,
		watch:   "election:gate",
	}
}

func electionKeys(l *Layout, name string) []string {
	return withMain(l, name, l.KeySet(false, name, "election", "fence", "election:gate", "hold"))
}

// electionArgs is ARGV = {token, TTL ms, value, "", "", "", fence retention
// ms}: the retention is ARGV[7], where clock_lib reads it.
func electionArgs(l *Layout, req store.Request) []string {
	return []string{req.Token, Millis(req.TTL), req.Value, "", "", "", l.Retention}
}

// LeaderScript describes the leader of an election (store.Elector); call it
// with [Layout.LeaderKeys] and no ARGV, and decode its reply, read as
// strings, with [DecodeLeader].
var LeaderScript = load("scripts/election_leader.lua")

// LeaderKeys is KEYS of LeaderScript.
func (l *Layout) LeaderKeys(name string) []string { return []string{l.Aux(name, "election")} }

// DecodeLeader decodes the reply of LeaderScript: {term, pttl, value}, or
// empty when nobody leads ([store.ErrNoLeader]).
func DecodeLeader(v []string) (store.Leader, error) {
	if len(v) == 0 {
		return store.Leader{}, store.ErrNoLeader
	}
	if len(v) != 3 {
		return store.Leader{}, fmt.Errorf("dlock: leader script replied %d values, want 3", len(v))
	}
	term, err1 := strconv.ParseInt(v[0], 10, 64)
	pttl, err2 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil {
		return store.Leader{}, fmt.Errorf("dlock: leader script replied %q", v[:2])
	}
	ld := store.Leader{Value: v[2], Term: term}
	if pttl > 0 {
		ld.TTL = time.Duration(pttl) * time.Millisecond
	}
	return ld, nil
}
