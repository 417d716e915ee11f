package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/jackc/pgx/v5"
)

var (
	_ store.Resumer       = (*Advisory)(nil)
	_ store.ForceReleaser = (*Advisory)(nil)
)

// Resume implements [store.Resumer] for the holds of this store's session:
// it checks that the session is alive (as Extend does) and that req.Token
// holds req.Name in req.Mode, and extends the hold to req.TTL, capped by
// its MaxHold. A hold lives with the session that took it, and the session
// with the process, so a restarted process has lost its holds: Resume
// answers [store.ErrNotHeld] for them, and for any token another store
// holds.
func (a *Advisory) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	if err := advMode(req.Mode); err != nil {
		return store.Grant{}, err
	}
	if err := validate(req); err != nil {
		return store.Grant{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checkSessionLocked(ctx, "resume")
	now := time.Now()
	if err := a.pruneLocked(ctx, req.Name, now); err != nil {
		return store.Grant{}, err
	}
	lk := a.locks[req.Name]
	if lk == nil || lk.mode != req.Mode {
		return store.Grant{}, store.ErrNotHeld
	}
	if _, ok := lk.holders[req.Token]; !ok {
		return store.Grant{}, store.ErrNotHeld
	}
	exp := lk.expiry(now, req.TTL)
	if lk.mode == store.ModeReentrant {
		lk.pushOut(exp)
	} else {
		lk.holders[req.Token] = exp
	}
	g := store.Grant{Acquired: true, Fence: lk.fence, Count: len(lk.holders), TTL: exp.Sub(now)}
	if lk.maxHold > 0 {
		g.MaxHoldLeft = max(lk.granted.Add(lk.maxHold).Sub(now), 0)
	}
	return g, nil
}

// heldElsewhereSQL finds the backend of another session that holds the
// advisory lock of a name (a bigint key: classid its high 32 bits, objid
// its low 32, objsubid 1).
const heldElsewhereSQL = `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
AND classid = ((hashtext($1)::bigint >> 32) & 4294967295)::oid AND objid = (hashtext($1)::bigint & 4294967295)::oid
AND pid <> pg_backend_pid() LIMIT 1`

// ForceRelease implements [store.ForceReleaser] for the holds of this
// store's session: it unlocks name, ending every local hold of it (a
// reentrant hold's every acquisition), and notifies watchers as Release
// does; the fence row is kept, so the next grant's fence is higher. It
// returns the ended hold, none when nobody holds the name.
//
// PostgreSQL lets only the session that holds an advisory lock unlock it.
// When another session holds name (another process's Advisory store, or
// code calling pg_advisory_lock), the only way to end that hold is to end
// that session, which would end every other lock it holds too; ForceRelease
// does not do that. It returns an error wrapping [store.ErrNotSupported]
// that names the session's backend PID, so that an operator can decide
// to run `SELECT pg_terminate_backend(pid)`. (A dlock process whose session
// ends loses every hold, as [Advisory] describes.)
func (a *Advisory) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	if err := store.ValidName(name); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	conn, err := a.sessionLocked(ctx)
	if err != nil {
		return nil, a.failLocked("force release", err)
	}
	if err := a.pruneLocked(ctx, name, time.Now()); err != nil {
		return nil, err
	}
	if lk := a.locks[name]; lk != nil {
		ended := []store.Holder{lk.record()}
		if err := a.unlockLocked(ctx, name, lk); err != nil {
			return nil, err
		}
		return ended, nil
	}
	var pid uint32
	err = conn.QueryRow(ctx, heldElsewhereSQL, name).Scan(&pid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, a.failLocked("force release", err)
	}
	return nil, fmt.Errorf("%w: postgres advisory lock %q is held by another session (backend PID %d): only that session can unlock it, and ending the session ends all its locks; an operator can run SELECT pg_terminate_backend(%d)",
		store.ErrNotSupported, name, pid, pid)
}

var _ store.MinHolder = (*Advisory)(nil)

// SupportsMinHold implements [store.MinHolder]: false. A released advisory
// lock is free to every session at once, and the lock has no expiry on the
// server, so only a timer in this process could keep the name to the
// min-hold end; Acquire refuses a MinHold on a mutex with an error wrapping
// [store.ErrNotSupported] (see [Advisory]). Use the lease-table [Store].
func (a *Advisory) SupportsMinHold() bool { return false }
