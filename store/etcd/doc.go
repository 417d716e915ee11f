// Package etcd is a [store.Store] on etcd v3 (go.etcd.io/etcd/client/v3;
// tested against Debian's etcd-server 3.4), for users who want their locks
// on a consensus store (seed 001, "Design Paths" 4; seed 003, "When NOT to
// use": strict correctness needs consensus).
//
// # Model
//
// Each hold, and each queue place, is one key under the lock's prefix
// (<prefix>l/<pattern>/<len>:<name>/<h|w>/<token>: pattern is m, r, w, f, s
// or e for mutex, reentrant, read-write, fair, semaphore, election; w marks a
// writer's key, h any other) attached to an etcd lease of its own: a one-key
// session. A lease's TTL is the hold's TTL rounded up to whole seconds (and
// at least etcd's minimum, 1.5 × the election timeout); etcd's leader expires
// it on its own clock, so no client clock is trusted.
// Extend renews the lease (LeaseKeepAlive, concurrently for a batch) and
// reports [store.ErrNotHeld] once the lease or its key is gone: the session
// ended, the lock was lost. Release revokes the lease, which deletes the key
// in the same step.
//
// While the process that took a hold lives, the store also keeps the TTL to
// the millisecond on its monotonic clock: a hold (or queue place) not renewed
// through this store within its TTL is revoked by the store's reaper, and a
// refusal reports the exact time left of holds granted here. Holds of other
// processes report the TTL they asked for as RetryAfter (an upper bound:
// etcd leases do not tell their remaining time below a second). When the
// process is gone, its holds end when etcd expires their leases: up to the
// TTL rounded up to a second, plus etcd's half-second expiry check.
//
// Mutual exclusion is the etcd recipe: the lock's keys ordered by create
// revision, the first one holds. Acquire reads the keys, decides, and writes
// in one transaction whose comparisons keep the decision true at commit (an
// exclusive grant requires the prefix to be empty; a reader, no writer key;
// a semaphore permit, its free slot key); a lost race rereads. The fair lock
// is the full recipe: waiters' keys queue in create-revision order, each
// waiter watches only its predecessor ([Store.WatchGrant]), a release hands
// the lock to the head (its key is claimed with a new fence). Read-write
// locks use key modes: readers hold while no writer key is ahead of them; a
// refused writer may leave its key as an intent that blocks new readers.
// Semaphores hold up to Limit keys, each on a free slot key. A leader
// election ([store.ModeElection], [Store.Leader]) is an exclusive pattern
// of its own whose key keeps the leader's value; the term is the grant's
// fence, and an election's watch also wakes on a new leader's key. Every
// pattern is supported.
//
// # Fences
//
// The fence of a grant is max(last + 1, clock floor): last is the name's
// previous fence, kept as the value of the name's fence key
// (<prefix>f/n/<len>:<name>, no lease), and the floor is the granting
// process's wall clock in milliseconds × 1000, the rule of every dlock store.
// The grant's transaction writes the new fence into the hold's key and the
// fence key, and commits only if the fence key is as read, so fences of a
// name rise strictly while etcd keeps its data, whatever the clocks do.
// Readers get the current fence, the lock's last exclusive grant's. Fences are
// comparable with those of the Valkey and PostgreSQL stores (about 10^15).
//
// Builds before 0.1.0 used the grant's etcd revision as the fence. Revisions
// start again from the snapshot's when etcd is restored from a snapshot or a
// backup (etcdctl snapshot restore without etcd 3.5's --bump-revision), so a
// fence repeated; the clock floor keeps the next fence above every fence
// issued before a restore as long as the restore takes longer than the
// granting processes' clocks differ and no clock stepped back by more
// (docs/safety.md, "Fences through a restore or a failover, store by
// store"). A fence key an older build wrote (an empty value) counts with its
// ModRevision, so fences still rise across the upgrade; an older build
// running beside this one on the same cluster would issue revisions again,
// far below: stop older processes first.
//
// # A hold's record and bounds
//
// A hold's record (issue 38: [store.Request] Holder and Data, the grant
// time, MinHold and MaxHold) is part of its key's value, written by the
// grant's transaction (a fair waiter's queue key carries it to its claim)
// and deleted with the key; a re-entry keeps its owner's first record. The
// grant time, [store.Holder] Since, is always recorded: etcd has no clock a
// client can read, so it is the granting process's wall clock (the clock of
// the fences' floor) to the millisecond, and each bound is measured from it
// by the wall clock of the process that applies it: processes whose clocks
// differ by d apply a MaxHold up to d apart.
//
// MaxHold caps every grant, Extend, repeated Acquire and Resume: the hold's
// lease is never granted or renewed past grant + MaxHold (a cap below the
// lease's whole seconds moves the key to a shorter lease), so etcd ends it
// there even when no dlock process is left, to its lease's second; an
// Extend once it passed answers [store.ErrNotHeld] and revokes the lease.
// A Release of a mutex, fair or election hold before grant + MinHold
// answers nil and moves the key, marked released (its token holds nothing
// from then on), to a lease that ends at grant + MinHold: etcd ends it
// there, no process keeps a timer (this process's reaper ends it to the
// millisecond while it lives). [Store.Resume] moves the token's key to a
// new lease in a transaction that commits only if the key is still the
// hold it read. [Store.ForceRelease] revokes the lease of every hold of
// the name, so keys and leases end together as on a Release; queue places
// and the fence key stay.
//
// # What is not guaranteed
//
// Jepsen found etcd 3.4.3's lock unsafe under partitions and pauses (seed
// 001, Path 4): a lease can expire while its holder still acts. That holds
// here too; dlock's Locker declares a lease lost locally before its TTL can
// run out on etcd, but a paused process acts late all the same. Use the fence
// at the protected resource. Without a quorum no lock can be taken, renewed
// or released.
//
// A name is one lock (see [store.Coexist]): an acquire reads the keys of
// every kind of the name with its own and commits only if no other kind's
// key was written since, so a hold of one pattern refuses every other
// pattern's request on the name; waiters watch every kind's keys; all kinds
// share the name's fence key. A name that another pattern frees is claimed
// by the fair queue's head at its own next Acquire; until then a request
// of any pattern may take the free name.
package etcd
