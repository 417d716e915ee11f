// Package postgres is a [store.Store] on PostgreSQL, for users who want
// their locks where their data already is (seed 001, "Design Paths" 5, and
// seed 003, "When NOT to use": a single database needs no Redis).
//
// # Lease table ([Store])
//
// [New] keeps leases in a table: one row per holder or queue place (name,
// holder token, mode, fence, expires_at), and one row per lock that every
// operation locks first (SELECT ... FOR UPDATE), so each operation is one
// call of a PL/pgSQL function ([Schema]): one statement, one round trip,
// one transaction. Expiry is judged by the database's clock
// (clock_timestamp()) only; clients never compare their clock with it. Every
// pattern is supported: mutex, reentrant, read-write (writer intents block new
// readers), fair (FIFO tickets from a sequence; a release hands the lock to
// the head of the queue in the same transaction), semaphore and leader
// election ([store.ModeElection], [Store.Leader]: an exclusive hold whose row
// keeps the leader's value; the term is its fence; a new leader is notified
// like a release). The advisory store has no elections.
//
// Fences come from the lock's row: max(last+1, now_ms*1000) by the
// database's clock, the hybrid floor every dlock store uses (DESIGN §3). They
// are strictly increasing per lock and durable (the row is in a WAL-logged
// table). A plain sequence would also be monotonic, but its values (1, 2,
// 3, ...) sit far below the fences other dlock stores issue, so a resource
// that recorded a fence from Valkey would reject every PostgreSQL fence after
// a switch of backend; with the floor, switching never goes back.
//
// A hold's record lives in its row, written by the statement that grants
// it and deleted with it: the holder and data the caller gave
// ([store.Request.Holder], [store.Request.Data]), the grant time by the
// database's clock (recorded on every grant), the MinHold and the MaxHold.
// [Store.State] and [Store.List] show it as [store.State.Owners]. A MaxHold
// caps every expiry a grant, extend or resume sets, whichever process sends
// it. A MinHold keeps an exclusive hold (mutex, fair, election) released
// before grant + MinHold: the release sets the row's expiry to that instant
// and clears its token, so the database's clock ends it and no process
// keeps a timer. [Store.Resume] takes a hold back by its token, from any
// process; [Store.ForceRelease] ends every hold of a name without tokens,
// keeping queue places and the fence counter.
//
// Schema 6 added the record: [New] migrates a database of an earlier
// schema in place (columns with constant defaults, so no table rewrite;
// holds taken before show an unknown holder), and keeps the functions
// earlier versions call, so processes of an earlier dlock keep working
// beside upgraded ones (their holds have no record, and they ignore
// MinHold and MaxHold, which they never send).
//
// Waiters are woken by LISTEN/NOTIFY: a release notifies channel "dlock"
// (delivered at commit) and the store's one listening connection wakes the
// local waiters of that lock. Expiry is not notified; waiters fall back to
// a timer at the remaining TTL the refusal reported.
//
// The lease table holds no session state, so it is safe behind a connection
// pooler such as PgBouncer in transaction mode (use pgx's
// default_query_exec_mode=exec or simple_protocol there); only Watch needs a
// session (LISTEN) and so a direct connection or a pooler in session mode.
//
// # Advisory locks ([Advisory])
//
// [NewAdvisory] takes PostgreSQL's own session-level advisory locks
// (pg_try_advisory_lock(hashtext(name))), so dlock interoperates with code
// that already uses pg_advisory_lock on the same key. See [Advisory] for the
// connection-pooling pitfall and how the store avoids it, and for what
// it keeps of a hold's record and bounds (no MinHold on a mutex: a
// released advisory lock is free at once).
//
// # Fencing the protected resource
//
// [FencedUpdate] is the conditional UPDATE of seed 004 with an equal fence
// accepted (`UPDATE ... WHERE fence_token <= $1`: a lower fence is refused,
// an equal one is the same holder writing again), for rows protected by a
// lock. (It lives here until the module root gains its `fence` package.)
//
// # What is not guaranteed
//
// A lock is only as available as the database: when PostgreSQL is down no
// lock can be taken, extended or released, and leases are lost once their
// TTL runs out on the client. With asynchronous replication a failover can
// lose the latest grants (a promoted replica may not have them): the fence
// floor keeps later fences above earlier ones only if the new primary's
// clock is not behind. Use synchronous replication when that matters.
//
// A name is one lock (see [store.Coexist]): every acquire and release locks
// the name's own row before its pattern's, so a hold of one pattern refuses
// every other pattern's request on the name, and all patterns share the
// name's fence counter.
package postgres
