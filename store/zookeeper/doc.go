// Package zookeeper is a [store.Store] on Apache ZooKeeper
// (github.com/go-zookeeper/zk; tested against Debian's zookeeper 3.8), for
// users who already run ZooKeeper (Kafka, HBase) and want the consensus
// store's guarantees (seed 001, "Design Paths" 3; seed 002, "ZooKeeper-Based
// Distributed Lock").
//
// # Model
//
// The store holds one ZooKeeper session. Every hold and queue place, of
// every pattern, is an ephemeral sequential znode under the name's one znode
// (<root>/x/n<base64url(name)>/<k><r|w|x>[b]~<owner>~<token>-<seq>, k the
// pattern's letter, b marking a node beside its owner's hold); the name's znode is a container, which ZooKeeper
// would delete once empty, but its persistent child "fence" (the name's
// last fence, see Fences) keeps it from the name's first grant on.
// Acquire is the recipe of seeds 001 and 002: create the node, list the
// children in sequence order, and hold when the rules of the mode say so (the
// first node for an exclusive lock, the first Limit nodes for a semaphore, no
// writer ahead for a reader, the first node's owner for a reentrant lock); a
// node that does not hold is deleted again unless the caller queues (a fair
// waiter or a writer intent, which then blocks new readers). A lock that
// plainly cannot be had is refused after the listing alone, without a write.
// Fair waiters watch only the node just before their own
// ([Store.WatchGrant]): one release wakes one waiter, no herd. A leader
// election ([store.ModeElection], [Store.Leader]) is an exclusive pattern of
// its own (letter e) whose node keeps the leader's value in its data; the
// term is the leader's fence. Every pattern is supported.
//
// # Fences
//
// A grant's fence is max(last + 1, clock floor), the rule of every dlock
// store: last is the name's last fence, kept in the persistent child
// "fence" of the name's znode; the floor is the granting process's wall
// clock ms×1000. The grant writes it in one multi-op with two operations:
// a set of its own node's data (recording the fence there), conditional on
// the node's version, so the multi fails if the node is gone; and a set of
// the fence child, conditional on its version (a compare-and-set; a round
// lost to another grant of the name is tried again). So a node whose hold
// ended (released, reaped, its session expired) before its fence was
// written takes no fence: the node's deletion and the next holder's fence
// come after the failed write in ZooKeeper's one order of transactions,
// and a fence written while the node existed comes before the next
// holder's, which reads it. While the ensemble keeps its data, fences of a
// name rise by last + 1 whatever any clock does; after a restore from a
// backup (zxids and the fence child come back from the backup's), the
// clock floor keeps them rising (docs/safety.md, "Fences through a restore
// or a failover"). Fences were czxids before; they are now comparable with
// the other stores'. A re-entry gets its hold's fence (recorded in its
// node); a reader the name's current fence, or a new one when the name has
// none; an election's term is its leader's fence ([Store.Leader] reads it
// from the leader's node). The fence child keeps the name's znode, a
// container, from being deleted: one znode pair per name stays.
//
// # Sessions, TTLs and loss
//
// Ephemeral nodes live as long as the session. While the process lives, the
// store keeps each hold's TTL to the millisecond on its monotonic clock: a
// node not renewed through this store within its TTL is deleted by the
// store's reaper, and Extend reports [store.ErrNotHeld]. A delete (of a
// release or of the reaper) that fails while the client is cut off from
// the ensemble and its session lives on is retried by the reaper until it
// succeeds or the session expires: the node would otherwise hold the lock
// for as long as the session lives. When the process
// dies or is cut off, ZooKeeper expires the session after the session
// timeout and deletes its nodes: a lost hold, which Extend reports as
// [store.ErrNotHeld] once the client is back. Because the server may end a
// hold as soon as a session timeout after it last heard from the client,
// Acquire rejects (with [store.ErrInvalid]) a TTL longer than the session
// timeout the server granted ([Store.SessionTimeout]; the store asks for 40s
// unless [WithSessionTimeout] says otherwise, and ZooKeeper grants at most
// 20 ticks, 40s with the default 2s tick): so a lease the Locker still
// believes valid is never one the server could have expired. Close ends the
// session, which frees every hold of the store at once, once the holds
// kept by their MinHold have ended (below).
//
// RetryAfter of a refusal is exact for holds of this store and otherwise the
// TTL the holder asked for (an upper bound). Extend and Release list the
// lock's children (one round trip; Extend lists every lock of a batch
// concurrently).
//
// # A hold's record and its bounds
//
// A hold's record (issue 38: [store.Request] Holder, Data, MinHold,
// MaxHold) is kept in its node's data, written when the node is created and
// again by the grant's multi-op with the fence, and gone with the node. A
// re-entry's node records nothing: the hold's record is its first node's.
// [store.State] Owners reads each holding node (one read each). Since is
// the grant's time by the ensemble's clock: the node's mtime, which the
// leader sets from its wall clock when it commits the grant's write (the
// fence; a reader that shares the name's fence writes nothing, and its
// node's creation is its grant), kept in the data once the node is written
// again (an early release kept by MinHold, a node moved into another
// session, below). Since is to the millisecond, and as right as the clock
// of the server that led the ensemble when the grant was committed. The
// record is always written: it is part of the node's data, which every
// grant writes anyway, so it costs no round trip.
//
// ZooKeeper has no per-node expiry fit for a lease (its TTL nodes are
// persistent and removed by a container sweep every minute or so, not at
// their time), so a hold's TTL is kept by the granting process's reaper
// (see Sessions, TTLs and loss), and so are its bounds, on that process's
// monotonic clock from the grant: MaxHold caps the deadline of every grant, Extend and Resume
// at grant + MaxHold, after which Extend answers [store.ErrNotHeld]; an
// exclusive hold (mutex, fair, election) released before grant + MinHold
// answers nil and stays, marked released in its node's data, until the
// reaper deletes it at grant + MinHold (its fence unchanged; its token
// then holds nothing: Extend and Resume answer ErrNotHeld, a repeated
// Acquire is refused). No timer runs for it but the reaper that keeps
// every TTL: this is a process, not the server. So [Store.Close] does
// not end a hold kept by its MinHold: it waits for the reaper to end
// every such hold of its session (released through this Store, or
// marked released through another) at its time, up to the longest
// remaining MinHold (capped at its MaxHold end), and then ends the
// session; a short-lived process (`dlock run --min-hold`) thus keeps the
// name until grant + MinHold, and exits then. Holds not released end at
// once, as before. If the process dies or is cut off, the server ends
// its holds with its session (after the session timeout), those kept by
// MinHold too: a crashed holder is bounded by its session.
//
// # Resume, and holds of other sessions
//
// A node lives as long as the session that created it, and only that
// process's reaper keeps its TTL and bounds. [Store.Resume] (a process
// taking back its hold after a restart while its old session has not
// expired yet, or a replica of the service taking a client's lease) first
// moves a hold of another session into this Store's session, in one
// multi-op: the node is deleted (only if unchanged since read) and created
// again as an ephemeral node of this session with the same data and
// sequence number (so the same place among the name's nodes, and the same
// fence) under a name of the next generation
// (<k><m>[b]~<owner>~<token>~<gen>-<seq>), then written once more so that
// its stat gives the ensemble's time. The bounds move with it: grant +
// MinHold and grant + MaxHold by the ensemble's clock become instants of
// this process's clock from that time, neither loosened by the round trip.
// The hold then lives as long as this session, and ends with it.
//
// Extend, a repeated Acquire and an early Release through a Store that did
// not grant the hold do the same only with [WithTakeOver] (for long-lived
// processes: a CLI command that took a hold over would end it on exit).
// Without it, as before these bounds existed, the hold stays in its
// granting session: an Extend renews this Store's own deadline for the
// node, not the granting process's, so the hold ends at the earlier of the
// two (and at its MaxHold end, which the granting process keeps); a
// Release before its MinHold ran out marks the node released, and the
// granting process's reaper, which reads the node when the TTL runs out
// while a MinHold is still running, keeps it until grant + MinHold (so it
// ends at the later of its TTL's end and grant + MinHold). Extend and
// Resume of a hold that has a MinHold read its node for that mark (one
// more read). A reentrant hold is one node per acquisition and is never
// moved.
//
// [Store.ForceRelease] deletes every node that holds the name, of any
// session, in one multi-op; queued nodes keep their places. The fence
// child stays, so the next grant's fence is above every ended hold's, and
// the deletions wake the name's watchers.
//
// # What is not guaranteed
//
// A holder paused past its session timeout finds its node gone only when it
// next asks; meanwhile another client may hold the lock. Use the fence at
// the protected resource. Without a quorum of the ensemble no lock can be
// taken, renewed or released.
//
// A name is one lock (see [store.Coexist]): the nodes of every pattern of a
// name queue under the name's one znode, and a node holds only when no node
// of another pattern is ahead of it, so a hold of one pattern refuses every
// other pattern's request on the name. Fences are the name's, shared by all
// patterns; every grant but a reader's issues a new one.
// Each node is created before its list is read and sequence numbers only
// grow, so of two nodes of different patterns the later one finds the
// earlier ahead of it and does not hold: they never both hold. A queued
// waiter (a fair waiter, a writer's intent) keeps later requests out, but
// not the holder's own: a re-entry, or a reader whose Owner is the holding
// writer's token (a downgrade), enters beside the hold wherever it stands
// in the queue. Its node is created in one multi-op
// that checks the owner's node still exists, so only while the owner holds;
// it is marked b and holds until deleted, and no node it cannot coexist
// with holds meanwhile, ahead of it or not. So a waiter of another pattern
// cannot deadlock a nested Lock, and the hold outlives the release of the
// node it entered beside. The znode layout changed with this rule (it was
// <root>/<pattern>/n<name>): run no older dlock on the same root at the
// same time.
package zookeeper
