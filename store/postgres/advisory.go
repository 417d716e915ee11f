package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	_ store.Store     = (*Advisory)(nil)
	_ store.Inspector = (*Advisory)(nil)
	_ store.Pinger    = (*Advisory)(nil)
)

// The kind of the fence rows of advisory locks in dlock_locks, and of their
// NOTIFY payloads, is 5 (written literally in the SQL below).

// Advisory is a store on PostgreSQL's session-level advisory locks: lock
// name N is pg_advisory_lock(hashtext(N)), the key of seed 001's Path 5, so
// a lock held through dlock is seen as held by code that runs
// `SELECT pg_advisory_lock(hashtext('N'))` itself, and the other way round.
// The mutex and reentrant patterns of one name share that one key (they
// exclude each other); two names whose hashtext collides exclude each other
// too (never the reverse).
//
// # The connection-pooling pitfall, and how Advisory avoids it
//
// A session-level advisory lock belongs to the database session (the
// connection), not to the code that took it. Taken on a pooled connection
// and not released before the connection goes back to the pool, it stays
// held by whoever gets that connection next (seed 001, "Session-Level Locks
// with Connection Pooling"). Advisory therefore takes its locks on one
// pinned connection of its own, opened with [pgx.ConnectConfig] outside any
// pool and used by nothing else; the store serialises its operations on it.
// A pooler in transaction or statement mode (PgBouncer) would still move
// statements between server sessions: every statement Advisory runs returns
// pg_backend_pid(), and a change of backend PID fails the operation with an
// error naming the pooler, instead of silently breaking the locks. Point
// Advisory at PostgreSQL directly, or at a pooler in session mode. For
// code that does its work inside one transaction, [XactLock] takes the
// transaction-level lock instead, which is safe with any pooler.
//
// # Leases and loss
//
// Advisory locks have no expiry: PostgreSQL holds them until they are
// unlocked or the session ends. The lease TTL is kept by the store on the
// client's clock: a hold not extended within its TTL is unlocked by the next
// operation on its name, and Extend reports [store.ErrNotHeld] for it. When
// the pinned session ends (the connection breaks, the server restarts or the
// backend is terminated), PostgreSQL drops every lock it held; the store
// notices on its next operation (Extend pings the session first), reports
// ErrNotHeld for every hold, and opens a new session. A process that dies
// releases its locks with its session, with no TTL to wait for.
//
// # Patterns
//
// Mutex and reentrant are supported. Read, write, fair and semaphore locks
// return an error wrapping [store.ErrNotSupported]: advisory locks have no
// queue that a try-lock could join, so neither writer intents (readers
// would starve writers) nor FIFO order can be kept across sessions, and
// there is no counted lock; use the lease-table [Store] for those. Fences
// come from the dlock_locks table of [Schema], bumped in the statement that
// takes the lock (so [NewAdvisory] needs the schema too).
// A refusal's RetryAfter is 0 and its Held is ModeMutex when another
// session holds the lock (its lease is unknown to this store). Mutex and
// reentrant holds of one name exclude each other: both take the name's one
// advisory lock. Watch wakes waiters on releases made
// through dlock (NOTIFY); unlocks by other code are seen on the next retry.
//
// # Hold records and bounds
//
// A hold's record (Holder, Data, and the grant time by the database's
// clock) is kept by this store beside the hold, so [Advisory.State] and
// [Advisory.List] show it for the holds of this store's session only.
// MaxHold caps every expiry at the grant + MaxHold, by this process's
// clock, which keeps the lease's TTL too. MinHold is not supported on a
// mutex: a session's advisory lock has no expiry on the server, so keeping
// the name past a release until the min-hold end would need a timer in
// this process (the next operation on the name would come at no set
// time); Acquire refuses it with an error wrapping [store.ErrNotSupported]
// (a reentrant hold ignores MinHold, as every non-exclusive mode does).
// [Advisory.Resume] finds only holds of this store's session: a restarted
// process's holds ended with its session. [Advisory.ForceRelease] ends
// holds of this session; one held by another session is refused with an
// error naming its backend, since ending it would end that whole session.
type Advisory struct {
	connCfg *pgx.ConnConfig
	cfg     config
	hub     *hub

	mu     sync.Mutex // serialises all use of conn
	conn   *pgx.Conn  // the pinned session, nil until needed or after it broke
	pid    uint32     // its backend PID
	locks  map[string]*advLock
	closed bool
}

// advLock is the state of one name this store holds on its session: one
// pg-level lock, shared by the local holders.
type advLock struct {
	mode    store.Mode // mutex or reentrant
	fence   int64
	owner   string               // reentrant
	holders map[string]time.Time // token → local expiry
	// The hold's record (a reentrant hold's first grant's): holder and
	// data, the grant by the database's clock (since), and by this
	// process's clock (granted), from which maxHold bounds every expiry.
	holder, data string
	since        time.Time
	granted      time.Time
	maxHold      time.Duration
}

// expiry is the local expiry of a lease of ttl from now, capped by the
// hold's max hold.
func (lk *advLock) expiry(now time.Time, ttl time.Duration) time.Time {
	exp := now.Add(ttl)
	if lk.maxHold > 0 {
		if end := lk.granted.Add(lk.maxHold); end.Before(exp) {
			exp = end
		}
	}
	return exp
}

// acquire answers req, from owner, for a name this store's session holds:
// a repeat by a holder or a re-entry is granted (the hold keeps its
// record), anything else refused.
func (lk *advLock) acquire(req store.Request, owner string, now time.Time) store.Grant {
	exp := lk.expiry(now, req.TTL)
	if _, ok := lk.holders[req.Token]; ok {
		if lk.mode == store.ModeReentrant {
			lk.pushOut(exp) // a retry shortens no acquisition, its own neither
		} else {
			lk.holders[req.Token] = exp
		}
		return store.Grant{Acquired: true, Fence: lk.fence, Count: len(lk.holders)}
	}
	if lk.mode == store.ModeReentrant && req.Mode == store.ModeReentrant && lk.owner == owner {
		lk.holders[req.Token] = exp
		lk.pushOut(exp)
		return store.Grant{Acquired: true, Fence: lk.fence, Count: len(lk.holders)}
	}
	var left time.Duration
	for _, e := range lk.holders {
		left = max(left, e.Sub(now))
	}
	return store.Grant{RetryAfter: left, Held: lk.mode}
}

// record is the hold's record, as State.Owners shows it.
func (lk *advLock) record() store.Holder {
	return store.Holder{Owner: lk.holder, Since: lk.since, Data: lk.data, Fence: lk.fence}
}

// pushOut gives every acquisition of a reentrant hold the hold's one
// expiry: the latest of theirs and exp (pushed out, never in).
func (lk *advLock) pushOut(exp time.Time) {
	for _, e := range lk.holders {
		if e.After(exp) {
			exp = e
		}
	}
	for tok := range lk.holders {
		lk.holders[tok] = exp
	}
}

// NewAdvisory returns an advisory-lock store on the database at url. It runs
// [Schema] (for the fence table) unless [WithoutMigrate] is given, with a
// short-lived pool it then closes, and opens its pinned session when first
// needed.
func NewAdvisory(ctx context.Context, url string, opts ...Option) (*Advisory, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, &store.InvalidError{Field: "postgres url", Reason: err.Error()}
	}
	a := &Advisory{connCfg: cc, cfg: newConfig(opts), locks: make(map[string]*advLock)}
	a.hub = newHub(cc, a.cfg.logger, nil)
	if a.cfg.migrate {
		pc, err := pgxpool.ParseConfig(url)
		if err != nil {
			return nil, &store.InvalidError{Field: "postgres url", Reason: err.Error()}
		}
		pc.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, storeErr("connect", err)
		}
		err = Migrate(ctx, pool)
		pool.Close()
		if err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Close unlocks everything by ending the pinned session, and stops the
// listener. Later operations fail.
func (a *Advisory) Close() error {
	a.hub.close()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.dropSessionLocked()
	return nil
}

// errNotPinned reports that statements of one session reached different
// backends.
var errNotPinned = errors.New("statements of one session ran on different backends: advisory locks need a session-pinned connection (a pooler in transaction or statement mode breaks them; use session mode or connect directly)")

// sessionLocked returns the pinned session, opening it when needed.
func (a *Advisory) sessionLocked(ctx context.Context) (*pgx.Conn, error) {
	if a.closed {
		return nil, errors.New("store closed")
	}
	if a.conn != nil && !a.conn.IsClosed() {
		return a.conn, nil
	}
	a.dropSessionLocked()
	conn, err := pgx.ConnectConfig(ctx, a.connCfg.Copy())
	if err != nil {
		return nil, err
	}
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	a.conn, a.pid = conn, pid
	return conn, nil
}

// dropSessionLocked closes the session: PostgreSQL releases its locks, and
// every local hold is gone.
func (a *Advisory) dropSessionLocked() {
	if a.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		a.conn.Close(ctx)
		cancel()
		a.conn = nil
	}
	for name := range a.locks {
		delete(a.locks, name)
	}
}

// failLocked ends the session after any error on it, and returns a store
// error. A statement that failed or was cancelled leaves unknown which
// locks the session holds (a try-lock may have run with its reply lost), so
// the store ends the session, which releases them all, rather than guess:
// its other holds are lost too and report ErrNotHeld on their next Extend.
func (a *Advisory) failLocked(op string, err error) error {
	a.dropSessionLocked()
	return storeErr(op, err)
}

func advMode(m store.Mode) error {
	switch m {
	case store.ModeMutex, store.ModeReentrant:
		return nil
	}
	return fmt.Errorf("%w: postgres advisory locks have no %v mode", store.ErrNotSupported, m)
}

// pruneLocked drops the expired local holders of name and unlocks the name
// when none is left.
func (a *Advisory) pruneLocked(ctx context.Context, name string, now time.Time) error {
	lk := a.locks[name]
	if lk == nil {
		return nil
	}
	for tok, exp := range lk.holders {
		if !now.Before(exp) {
			delete(lk.holders, tok)
		}
	}
	if len(lk.holders) > 0 {
		return nil
	}
	return a.unlockLocked(ctx, name, lk)
}

const advUnlockSQL = "SELECT pg_advisory_unlock(hashtext($1)::bigint), pg_notify('dlock', '5:' || $1), pg_backend_pid()"

func (a *Advisory) unlockLocked(ctx context.Context, name string, lk *advLock) error {
	delete(a.locks, name)
	if a.conn == nil {
		return nil
	}
	var (
		ok  bool
		pid uint32
	)
	err := a.conn.QueryRow(ctx, advUnlockSQL, name).Scan(&ok, nil, &pid)
	if err == nil && pid != a.pid {
		err = errNotPinned
	}
	if err != nil {
		return a.failLocked("release", err)
	}
	return nil
}

// advLockSQL takes the lock and, only if taken, bumps the name's fence, in
// one statement; it returns the grant's time by the database's clock too.
const advLockSQL = `WITH t AS (SELECT pg_try_advisory_lock(hashtext($1)::bigint) AS ok)
INSERT INTO dlock_locks AS l (kind, name, fence) SELECT 5, $1, dlock_next_fence(0, clock_timestamp()) FROM t WHERE t.ok
ON CONFLICT (kind, name) DO UPDATE SET fence = dlock_next_fence(l.fence, clock_timestamp()), updated_at = clock_timestamp()
RETURNING l.fence, pg_backend_pid(), clock_timestamp()`

// errMinHold is Acquire's answer to a MinHold on an exclusive hold.
var errMinHold = fmt.Errorf("%w: postgres advisory locks cannot keep a name past its release: the lock lives with the session and has no expiry on the server, so only a timer in this process could unlock it at the min-hold end (use the lease-table Store)", store.ErrNotSupported)

// Acquire implements [store.Store]. See [Advisory] for the modes. A new
// hold's record (Holder, Data, the grant time by the database's clock) is
// kept with the hold by this store; MaxHold caps every expiry; a MinHold
// on a mutex is refused with an error wrapping [store.ErrNotSupported]
// (see [Advisory]) before anything is taken.
func (a *Advisory) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	if err := advMode(req.Mode); err != nil {
		return store.Grant{}, err
	}
	if err := validate(req); err != nil {
		return store.Grant{}, err
	}
	if err := store.ValidHold(req); err != nil {
		return store.Grant{}, err
	}
	if req.MinHold > 0 && req.Mode == store.ModeMutex {
		return store.Grant{}, errMinHold
	}
	owner := req.Owner
	if owner == "" {
		owner = req.Token
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	conn, err := a.sessionLocked(ctx)
	if err != nil {
		return store.Grant{}, a.failLocked("acquire", err)
	}
	now := time.Now()
	if err := a.pruneLocked(ctx, req.Name, now); err != nil {
		return store.Grant{}, err
	}
	if lk := a.locks[req.Name]; lk != nil {
		return lk.acquire(req, owner, now), nil
	}
	var (
		fence int64
		pid   uint32
		since time.Time
	)
	err = conn.QueryRow(ctx, advLockSQL, req.Name).Scan(&fence, &pid, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Grant{}, nil // another session holds it
	}
	if err == nil && pid != a.pid {
		err = errNotPinned
	}
	if err != nil {
		return store.Grant{}, a.failLocked("acquire", err)
	}
	lk := &advLock{
		mode: req.Mode, fence: fence, owner: owner, holders: make(map[string]time.Time, 1),
		holder: req.Holder, data: req.Data, since: since.Truncate(time.Millisecond), granted: now, maxHold: req.MaxHold,
	}
	lk.holders[req.Token] = lk.expiry(now, req.TTL)
	a.locks[req.Name] = lk
	return store.Grant{Acquired: true, Fence: fence, Count: 1}, nil
}

// Extend implements [store.Store]. It first checks that the pinned session
// is alive and still the same backend (one round trip for the batch); if it
// is not, every hold is lost and each request gets [store.ErrNotHeld].
func (a *Advisory) Extend(ctx context.Context, reqs []store.Request) []error {
	errs := make([]error, len(reqs))
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checkSessionLocked(ctx, "extend")
	now := time.Now()
	for i, req := range reqs {
		if err := advMode(req.Mode); err != nil {
			errs[i] = err
			continue
		}
		_ = a.pruneLocked(ctx, req.Name, now)
		lk := a.locks[req.Name]
		if lk == nil {
			errs[i] = store.ErrNotHeld
			continue
		}
		if _, ok := lk.holders[req.Token]; !ok {
			errs[i] = store.ErrNotHeld
			continue
		}
		if lk.mode == store.ModeReentrant {
			lk.pushOut(lk.expiry(now, req.TTL))
		} else {
			lk.holders[req.Token] = lk.expiry(now, req.TTL)
		}
	}
	return errs
}

// checkSessionLocked checks that the pinned session is alive and still the
// same backend; if it is not, it ends it: every hold is gone with it.
func (a *Advisory) checkSessionLocked(ctx context.Context, op string) {
	if a.conn == nil {
		return
	}
	var pid uint32
	err := a.conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	if err == nil && pid != a.pid {
		err = errNotPinned
	}
	if err != nil {
		_ = a.failLocked(op, err)
	}
}

// Release implements [store.Store]: the last local holder of a name unlocks
// it and notifies watchers.
func (a *Advisory) Release(ctx context.Context, req store.Request) error {
	if err := advMode(req.Mode); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.pruneLocked(ctx, req.Name, time.Now()); err != nil {
		return err
	}
	lk := a.locks[req.Name]
	if lk == nil {
		return store.ErrNotHeld
	}
	if _, ok := lk.holders[req.Token]; !ok {
		return store.ErrNotHeld
	}
	delete(lk.holders, req.Token)
	if len(lk.holders) > 0 {
		return nil
	}
	return a.unlockLocked(ctx, req.Name, lk)
}

// Watch implements [store.Store]: releases through dlock stores wake the
// watchers (LISTEN/NOTIFY); see [Store.Watch].
func (a *Advisory) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	if err := advMode(mode); err != nil {
		return nil, nil, err
	}
	return a.hub.watch(ctx, name) // a release of any kind may free the name
}

// Ping implements [store.Pinger]: it opens the pinned session if needed and
// checks it answers.
func (a *Advisory) Ping(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	conn, err := a.sessionLocked(ctx)
	if err == nil {
		err = conn.Ping(ctx)
	}
	if err != nil {
		return a.failLocked("ping", err)
	}
	return nil
}

// State implements [store.Inspector] for the locks this store holds.
// (Advisory locks of other sessions appear in pg_locks, by key only.) A
// hold whose lease has run out is unlocked first, as by any operation on
// its name, so it is not shown.
func (a *Advisory) State(ctx context.Context, name string) (store.State, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if err := a.pruneLocked(ctx, name, now); err != nil {
		return store.State{}, err
	}
	return a.stateLocked(name, now), nil
}

func (a *Advisory) stateLocked(name string, now time.Time) store.State {
	st := store.State{Name: name}
	lk := a.locks[name]
	if lk == nil {
		return st
	}
	st.Mode, st.Fence, st.Holders = lk.mode, lk.fence, len(lk.holders)
	if lk.mode == store.ModeReentrant {
		st.Holders = 1
	}
	st.Owners = []store.Holder{lk.record()} // a mutex or a reentrant hold: one
	for _, e := range lk.holders {
		st.TTL = max(st.TTL, e.Sub(now))
	}
	return st
}

// List implements [store.Inspector]: the locks this store holds, by name,
// those whose leases have run out unlocked first (as State does).
func (a *Advisory) List(ctx context.Context) ([]store.State, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	names := make([]string, 0, len(a.locks))
	for n := range a.locks {
		if err := a.pruneLocked(ctx, n, now); err != nil {
			return nil, err
		}
		if a.locks[n] != nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]store.State, 0, len(names))
	for _, n := range names {
		out = append(out, a.stateLocked(n, now))
	}
	return out, nil
}

// Querier is what [XactLock] and [FencedUpdate] run on: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// XactLock takes the transaction-level advisory lock of name in tx
// (pg_advisory_xact_lock(hashtext(name))), waiting until it is free or ctx
// ends. PostgreSQL releases it when tx commits or rolls back, so it cannot
// leak through a connection pool: the pooling-safe form of seed 001's Path
// 5. It has no lease, no fence and no loss signal: the transaction is the
// lease.
func XactLock(ctx context.Context, tx pgx.Tx, name string) error {
	var ok string
	if err := tx.QueryRow(ctx, "SELECT pg_advisory_xact_lock(hashtext($1)::bigint)::text", name).Scan(&ok); err != nil {
		return storeErr("acquire", err)
	}
	return nil
}

// TryXactLock is [XactLock] without waiting: it reports false when another
// session holds the lock.
func TryXactLock(ctx context.Context, tx pgx.Tx, name string) (bool, error) {
	var ok bool
	if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtext($1)::bigint)", name).Scan(&ok); err != nil {
		return false, storeErr("acquire", err)
	}
	return ok, nil
}
