package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	_ store.Store     = (*Store)(nil)
	_ store.Inspector = (*Store)(nil)
	_ store.Pinger    = (*Store)(nil)
)

// Schema is the SQL that creates the tables, the sequence and the functions
// the lease-table [Store] uses. It is idempotent. [New] runs it unless
// [WithoutMigrate] is given; a DBA can run it once instead.
//
//go:embed schema.sql
var Schema string

// migrateLockKey serialises concurrent migrations (CREATE OR REPLACE
// FUNCTION run by two sessions at once can fail with "tuple concurrently
// updated"). It is the advisory-lock key ('dlock' in ASCII).
const migrateLockKey = 0x646c6f636b

// notifyChannel is the LISTEN/NOTIFY channel of every lease-table store.
const notifyChannel = "dlock"

// sweepInterval is how often a store with a running listener deletes
// expired leases and lock rows idle for sweepIdle.
const (
	sweepInterval = 5 * time.Minute
	sweepIdle     = 24 * time.Hour
)

// An Option configures a [Store] or an [Advisory] store.
type Option func(*config)

type config struct {
	migrate bool
	logger  *slog.Logger
}

// WithoutMigrate skips running [Schema] in [New]: the tables and functions
// must already exist (for a database user without CREATE rights).
// By default New runs it, which is idempotent and takes a moment.
func WithoutMigrate() Option { return func(c *config) { c.migrate = false } }

// WithLogger sets the logger for background events (listener reconnects).
// The default discards logs.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

func newConfig(opts []Option) config {
	c := config{migrate: true, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Store is the lease-table store. The zero value is not usable; call [New]
// or [NewWithPool]. A Store is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool
	cfg     config

	hub *hub
}

// New connects to the PostgreSQL database at url (a libpq URL or keyword
// string, as [pgxpool.ParseConfig] takes, pool options included), runs
// [Schema] unless [WithoutMigrate] is given, and returns the store. Close
// closes the pool.
func New(ctx context.Context, url string, opts ...Option) (*Store, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, &store.InvalidError{Field: "postgres url", Reason: err.Error()}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, &store.StoreError{Op: "connect", Node: -1, Err: err}
	}
	s, err := newStore(ctx, pool, true, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// NewWithPool returns a store on the caller's pool, running [Schema] unless
// [WithoutMigrate] is given. Close leaves the pool open. Watch opens one
// dedicated connection of its own with the pool's connection settings (a
// LISTEN needs a session that no one else uses).
func NewWithPool(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, &store.InvalidError{Field: "pool", Reason: "must not be nil"}
	}
	return newStore(ctx, pool, false, opts)
}

func newStore(ctx context.Context, pool *pgxpool.Pool, own bool, opts []Option) (*Store, error) {
	s := &Store{pool: pool, ownPool: own, cfg: newConfig(opts)}
	s.hub = newHub(pool.Config().ConnConfig, s.cfg.logger, func(ctx context.Context) { _ = s.Sweep(ctx) })
	if s.cfg.migrate {
		if err := Migrate(ctx, pool); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// schemaVersion is the comment Schema puts on dlock_acquire_v6.
const schemaVersion = "dlock schema 6"

// versionSQL reads the schema version of the database.
const versionSQL = "SELECT obj_description(to_regproc('dlock_acquire_v6'), 'pg_proc')"

// Migrate runs [Schema] on pool's database in one transaction, serialised
// against other migrations by an advisory lock. It does nothing when the
// database already has this version of the schema.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	var have *string
	err := pool.QueryRow(ctx, versionSQL).Scan(&have)
	if err == nil && have != nil && *have == schemaVersion {
		return nil
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLockKey)); err != nil {
			return err
		}
		// Another migration may have run while this one waited: running the
		// schema again would drop and re-create functions in use.
		var now *string
		if err := tx.QueryRow(ctx, versionSQL).Scan(&now); err == nil && now != nil && *now == schemaVersion {
			return nil
		}
		_, err := tx.Exec(ctx, Schema)
		return err
	})
	if err != nil {
		return &store.StoreError{Op: "migrate", Node: -1, Err: err}
	}
	return nil
}

// Close stops the listener and waits for it, and closes the pool if New
// opened it. Waiters' channels stay open and receive nothing more.
func (s *Store) Close() error {
	s.hub.close()
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// Pool returns the store's connection pool, for the protected resource's own
// queries (such as [FencedUpdate]).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// kind is the namespace of a mode: each kind keeps its own names, as the
// Valkey store keeps its own keys per pattern.
func kind(m store.Mode) (int16, error) {
	switch m {
	case store.ModeMutex:
		return 0, nil
	case store.ModeReentrant:
		return 1, nil
	case store.ModeRead, store.ModeWrite:
		return 2, nil
	case store.ModeFair:
		return 3, nil
	case store.ModeSemaphore:
		return 4, nil
	case store.ModeElection:
		return 6, nil // 5 is the advisory store's
	}
	return 0, fmt.Errorf("%w: postgres store mode %v", store.ErrNotSupported, m)
}

var kindMode = map[int16]store.Mode{0: store.ModeMutex, 1: store.ModeReentrant, 2: store.ModeRead, 3: store.ModeFair, 4: store.ModeSemaphore, 6: store.ModeElection}

func validate(req store.Request) error {
	if err := store.ValidName(req.Name); err != nil {
		return err
	}
	if req.Token == "" {
		return &store.InvalidError{Field: "token", Reason: "must not be empty"}
	}
	if req.TTL < time.Millisecond {
		return &store.InvalidError{Field: "ttl", Reason: "must be at least 1ms"}
	}
	if req.Mode == store.ModeSemaphore && req.Limit < 1 {
		return &store.InvalidError{Field: "limit", Reason: "must be at least 1"}
	}
	return nil
}

func storeErr(op string, err error) error {
	return &store.StoreError{Op: op, Node: -1, Err: err}
}

// ms rounds d up to whole milliseconds.
func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

const acquireSQL = `SELECT o_status, o_fence, o_retry_ms, o_count, o_pos
FROM dlock_acquire_v6($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

// Acquire implements [store.Store]: one call of the dlock_acquire_v6
// function, which locks the lock's row, drops expired holders by the
// database's clock, decides and writes in one transaction. A new hold's
// record (Holder, Data, the grant time by the database's clock, MinHold for
// the exclusive modes, MaxHold) is written in the row the grant inserts; a
// grant's expiry is capped by the hold's MaxHold.
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	k, err := kind(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	if err := validate(req); err != nil {
		return store.Grant{}, err
	}
	if err := store.ValidHold(req); err != nil {
		return store.Grant{}, err
	}
	qttl := req.QueueTTL
	if req.Queue && qttl <= 0 {
		qttl = req.TTL
	}
	if req.Mode == store.ModeElection {
		req.Owner = req.Value // the leader's value is kept in owner
	}
	var (
		status       string
		fence, retry int64
		count, pos   int32
	)
	err = s.pool.QueryRow(ctx, acquireSQL,
		k, req.Name, req.Token, int16(req.Mode), req.Owner, int32(req.Limit), ms(req.TTL), req.Queue, ms(qttl),
		req.Holder, req.Data, ms(req.MinHold), ms(req.MaxHold),
	).Scan(&status, &fence, &retry, &count, &pos)
	if err != nil {
		return store.Grant{}, storeErr("acquire", err)
	}
	switch status {
	case "acquired":
		return store.Grant{Acquired: true, Fence: fence, Count: int(count), Position: 0}, nil
	case "upgrade":
		return store.Grant{}, store.ErrUpgrade
	case "limit":
		return store.Grant{}, &store.LimitError{Name: req.Name, Held: int(count), Asked: req.Limit}
	}
	held, _ := strconv.Atoi(strings.TrimPrefix(status, "locked:")) // "locked:<store.Mode>"
	return store.Grant{RetryAfter: time.Duration(retry) * time.Millisecond, Position: int(pos), Held: store.Mode(held)}, nil
}

const extendSQL = `UPDATE dlock_leases SET expires_at = dlock_cap(clock_timestamp() + $4 * interval '1 millisecond', since, max_ms), ttl_ms = $4
WHERE kind = $1 AND name = $2 AND token = $3 AND held AND expires_at > clock_timestamp()`

// extendReentrantSQL pushes out the one expiry of a reentrant hold (every
// acquisition's row) while the token is among them.
const extendReentrantSQL = `UPDATE dlock_leases SET expires_at = greatest(expires_at, dlock_cap(clock_timestamp() + $4 * interval '1 millisecond', since, max_ms))
WHERE kind = $1 AND name = $2 AND held AND expires_at > clock_timestamp() AND EXISTS (
    SELECT 1 FROM dlock_leases m WHERE m.kind = $1 AND m.name = $2 AND m.token = $3 AND m.held AND m.expires_at > clock_timestamp())`

// Extend implements [store.Store]: one conditional UPDATE per request, all
// sent in one pipelined batch (one round trip). A lease that has expired by
// the database's clock is not revived: its Extend reports [store.ErrNotHeld].
// The new expiry is capped by the hold's MaxHold, so once a hold has run to
// it, its Extend reports ErrNotHeld whichever process sends it.
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
	errs := make([]error, len(reqs))
	b := &pgx.Batch{}
	idx := make([]int, 0, len(reqs))
	for i, req := range reqs {
		k, err := kind(req.Mode)
		if err == nil {
			err = validate(req)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		q := extendSQL
		if req.Mode == store.ModeReentrant {
			q = extendReentrantSQL
		}
		b.Queue(q, k, req.Name, req.Token, ms(req.TTL))
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return errs
	}
	br := s.pool.SendBatch(ctx, b)
	for _, i := range idx {
		tag, err := br.Exec()
		switch {
		case err != nil:
			errs[i] = storeErr("extend", err)
		case tag.RowsAffected() == 0:
			errs[i] = store.ErrNotHeld
		}
	}
	if err := br.Close(); err != nil {
		for _, i := range idx {
			if errs[i] == nil {
				errs[i] = storeErr("extend", err)
			}
		}
	}
	return errs
}

// Release implements [store.Store]: one call of dlock_release_v6, which
// deletes the token's row, hands a fair lock to its head waiter, and
// notifies watchers (on commit). An exclusive hold released before its
// MinHold has run keeps its row until then (the row's expiry set to the
// grant + MinHold, its token cleared so that nobody holds it), and nothing
// is notified: waiters wake by their timer at the RetryAfter a refusal
// reported.
func (s *Store) Release(ctx context.Context, req store.Request) error {
	k, err := kind(req.Mode)
	if err != nil {
		return err
	}
	if req.Token == "" {
		return &store.InvalidError{Field: "token", Reason: "must not be empty"}
	}
	var ok bool
	if err := s.pool.QueryRow(ctx, "SELECT dlock_release_v6($1, $2, $3)", k, req.Name, req.Token).Scan(&ok); err != nil {
		return storeErr("release", err)
	}
	if !ok {
		return store.ErrNotHeld
	}
	return nil
}

// Ping implements [store.Pinger].
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return storeErr("ping", err)
	}
	return nil
}

const stateSQL = `SELECT l.kind, l.name, l.fence, l.lim,
    count(*) FILTER (WHERE s.held AND s.expires_at > clock_timestamp()),
    count(*) FILTER (WHERE NOT s.held AND s.expires_at > clock_timestamp()),
    coalesce(max(s.expires_at) FILTER (WHERE s.held AND s.expires_at > clock_timestamp()) - clock_timestamp(), interval '0'),
    coalesce(bool_or(s.mode = 3 AND s.held AND s.expires_at > clock_timestamp()), false),
    coalesce(array_agg(s.holder ORDER BY s.since, s.token) FILTER (WHERE s.held AND s.expires_at > clock_timestamp()), '{}'),
    coalesce(array_agg(coalesce(floor(extract(epoch FROM s.since) * 1000)::bigint, 0) ORDER BY s.since, s.token)
        FILTER (WHERE s.held AND s.expires_at > clock_timestamp()), '{}'),
    coalesce(array_agg(s.data ORDER BY s.since, s.token) FILTER (WHERE s.held AND s.expires_at > clock_timestamp()), '{}'),
    coalesce(array_agg(s.fence ORDER BY s.since, s.token) FILTER (WHERE s.held AND s.expires_at > clock_timestamp()), '{}')
FROM dlock_locks l LEFT JOIN dlock_leases s ON s.kind = l.kind AND s.name = l.name
`

// owners builds State.Owners from the record columns of the live holds
// (stateSQL's arrays, in one order).
func owners(holders, data []string, since, fences []int64) []store.Holder {
	out := make([]store.Holder, 0, len(holders))
	for i := range holders {
		h := store.Holder{Owner: holders[i], Data: data[i], Fence: fences[i]}
		if since[i] > 0 {
			h.Since = time.UnixMilli(since[i])
		}
		out = append(out, h)
	}
	return out
}

func scanStates(rows pgx.Rows) ([]store.State, error) {
	var out []store.State
	for rows.Next() {
		var (
			k              int16
			st             store.State
			lim            int32
			holders, queue int64
			ttl            time.Duration
			writer         bool
			who, data      []string
			since, fences  []int64
		)
		if err := rows.Scan(&k, &st.Name, &st.Fence, &lim, &holders, &queue, &ttl, &writer, &who, &since, &data, &fences); err != nil {
			return nil, err
		}
		st.Owners = owners(who, data, since, fences)
		st.Mode = kindMode[k]
		if writer {
			st.Mode = store.ModeWrite
		}
		st.Holders, st.Queue, st.TTL = int(holders), int(queue), ttl
		if st.Mode == store.ModeReentrant && holders > 0 {
			st.Holders = 1            // one owner, however many acquisitions,
			st.Owners = st.Owners[:1] // whose rows share the first grant's record
		}
		if st.Mode == store.ModeSemaphore {
			st.Limit = int(lim)
		}
		out = append(out, st)
	}
	return out, rows.Err()
}

// State implements [store.Inspector]. A name used by several patterns (each
// its own namespace) reports the one with holders, else the one used last.
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	rows, err := s.pool.Query(ctx, stateSQL+` WHERE l.name = $1 AND l.kind >= 0 GROUP BY l.kind, l.name, l.fence, l.lim, l.updated_at
ORDER BY 5 DESC, 6 DESC, l.updated_at DESC`, name)
	if err != nil {
		return store.State{}, storeErr("state", err)
	}
	sts, err := scanStates(rows)
	if err != nil {
		return store.State{}, storeErr("state", err)
	}
	if len(sts) == 0 {
		return store.State{Name: name}, nil
	}
	return sts[0], nil
}

// List implements [store.Inspector]: every lock with a live holder or queue
// place, by name.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	rows, err := s.pool.Query(ctx, stateSQL+` WHERE s.expires_at > clock_timestamp() AND l.kind >= 0 GROUP BY l.kind, l.name, l.fence, l.lim ORDER BY l.name, l.kind`)
	if err != nil {
		return nil, storeErr("list", err)
	}
	sts, err := scanStates(rows)
	if err != nil {
		return nil, storeErr("list", err)
	}
	sort.SliceStable(sts, func(i, j int) bool { return sts[i].Name < sts[j].Name })
	return sts, nil
}

// Sweep deletes expired leases and the rows of locks idle for a day with no
// lease (their fences stay safe: see dlock_next_fence in [Schema]). Stores
// run it every five minutes while their listener runs; expired leases of a
// lock are also dropped by every operation on it.
func (s *Store) Sweep(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `WITH expired AS (DELETE FROM dlock_leases WHERE expires_at <= clock_timestamp())
DELETE FROM dlock_locks l WHERE l.updated_at < clock_timestamp() - $1 * interval '1 millisecond'
  AND NOT EXISTS (SELECT 1 FROM dlock_leases s WHERE (s.kind = l.kind OR l.kind = -1) AND s.name = l.name AND s.expires_at > clock_timestamp())`,
		sweepIdle.Milliseconds())
	if err != nil {
		return storeErr("sweep", err)
	}
	return nil
}

// Watch implements [store.Store] with LISTEN/NOTIFY: Release notifies, on
// commit, everyone watching the lock. Expiry is not notified (the database
// has no timer); waiters rely on their timer at RetryAfter. The first Watch
// opens the store's one listening connection and returns once it listens;
// when that connection breaks it reconnects, and wakes every watcher each
// time it is back (notifications may have been missed).
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	if _, err := kind(mode); err != nil {
		return nil, nil, err
	}
	// A name is one lock: a release of any kind may free it.
	return s.hub.watch(ctx, name)
}

var _ store.LockDelayer = (*Store)(nil)

// SupportsLockDelay implements [store.LockDelayer]: a hold's row expires by
// the database's clock. ([Advisory] does not support lock-delay: its locks
// have no expiry on the server.)
func (s *Store) SupportsLockDelay() bool { return true }
