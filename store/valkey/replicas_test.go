package valkey_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// The tests of WithWaitReplicas beyond the mutex grant (TestWaitReplicas):
// every write a failover could lose while a client counts on it is
// confirmed by WAIT, or reported.

// replicaWait is the WAIT timeout of these tests: long enough for a live
// replica on loopback, short enough that a paused one fails fast.
const replicaWait = 300 * time.Millisecond

// wantNotReplicated fails t unless err is a *ReplicationError wrapping
// ErrNotReplicated and ErrUnavailable.
func wantNotReplicated(t *testing.T, what string, err error) {
	t.Helper()
	var re *valkey.ReplicationError
	if !errors.As(err, &re) || !errors.Is(err, valkey.ErrNotReplicated) || !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("%s with the replica paused = %v; want a *ReplicationError wrapping ErrNotReplicated and ErrUnavailable", what, err)
	}
}

// pttl returns the PTTL of key on srv, in milliseconds.
func pttl(t *testing.T, srv *testredis.Server, key string) int {
	t.Helper()
	n, err := strconv.Atoi(mustDo(t, srv, "PTTL", key))
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return n
}

// failover kills primary, promotes replica (REPLICAOF NO ONE) and returns a
// Store on it: the client repointed at the new primary.
func failover(t *testing.T, primary, replica *testredis.Server) *valkey.Store {
	t.Helper()
	primary.Kill()
	mustDo(t, replica, "REPLICAOF", "NO", "ONE")
	return dial(t, replica.URL())
}

// TestWaitReplicasExtend: under WithWaitReplicas the extension of every mode
// waits for the replica: with the replica paused it is reported (a
// *ReplicationError, which is not ErrNotHeld, so a lease keeps its old
// validity), and once Extend returns nil the replica has the new TTL.
func TestWaitReplicasExtend(t *testing.T) {
	primary := testredis.Start(t)
	replica := testredis.StartReplica(t, primary)
	s := dial(t, primary.URL(), valkey.WithWaitReplicas(1, replicaWait))
	ctx := prototest.Context(t)
	modes := append([]store.Mode{store.ModeElection}, interopModes...)
	for _, m := range modes {
		t.Run(m.String(), func(t *testing.T) {
			name := "extend-" + m.String()
			req := interopReq(name, m, "token-a") // TTL 10s
			if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
				t.Fatalf("Acquire(%s) = %+v, %v; want a grant", name, g, err)
			}
			req.TTL = time.Minute
			replica.Pause()
			err := s.Extend(ctx, []store.Request{req})[0]
			replica.Resume()
			wantNotReplicated(t, "Extend("+name+")", err)

			req.TTL = 2 * time.Minute
			if err := s.Extend(ctx, []store.Request{req})[0]; err != nil {
				t.Fatalf("Extend(%s) to 2m with a live replica = %v, want nil", name, err)
			}
			if got := pttl(t, replica, "lock:"+name); got <= 110_000 {
				t.Errorf("replica's PTTL lock:%s right after the confirmed extension = %d, want above 110000", name, got)
			}
		})
	}
}

// TestWaitReplicasLeaseExtend: through a Locker, an extension the replica
// did not confirm is an error that leaves the lease's validity as it was;
// a confirmed one survives a failover (the promoted replica refuses the
// lock to others after the old TTL has passed).
func TestWaitReplicasLeaseExtend(t *testing.T) {
	for _, m := range []store.Mode{store.ModeMutex, store.ModeFair} {
		t.Run(m.String(), func(t *testing.T) {
			primary := testredis.Start(t)
			replica := testredis.StartReplica(t, primary)
			s := dial(t, primary.URL(), valkey.WithWaitReplicas(1, replicaWait))
			l := prototest.NewLocker(t, s, dlock.WithTTL(2*time.Second))
			ctx := prototest.Context(t)
			tryLock := func(l *dlock.Locker) (*dlock.Lease, error) {
				if m == store.ModeFair {
					return l.Fair("x").TryLock(ctx)
				}
				return l.Mutex("x").TryLock(ctx)
			}
			ls, err := tryLock(l)
			if err != nil {
				t.Fatalf("TryLock = %v", err)
			}

			replica.Pause()
			before := ls.TTL()
			err = ls.Extend(ctx, time.Minute)
			replica.Resume()
			var se *store.StoreError
			if !errors.As(err, &se) || !errors.Is(err, valkey.ErrNotReplicated) {
				t.Errorf("Extend(1m) with the replica paused = %v; want a *StoreError wrapping ErrNotReplicated", err)
			}
			if got := ls.TTL(); got > before || ls.Err() != nil {
				t.Errorf("after the unconfirmed extension TTL = %v (was %v), Err = %v; want the old validity, still held", got, before, ls.Err())
			}

			if err := ls.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("Extend(1m) with a live replica = %v", err)
			}
			promoted := failover(t, primary, replica)
			time.Sleep(2500 * time.Millisecond) // past the grant's TTL
			if got := pttl(t, replica, "lock:x"); got < 50_000 {
				t.Errorf("promoted replica's PTTL lock:x = %d, want the extended TTL, above 50000", got)
			}
			other, err := tryLock(prototest.NewLocker(t, promoted))
			if !errors.Is(err, dlock.ErrLocked) {
				t.Errorf("TryLock on the promoted replica while the extended lease is valid = %v, %v; want ErrLocked", other, err)
			}
		})
	}
}

// TestWaitReplicasFairHandoff: a release hands the fair lock to the head of
// its queue inside the release script; the waiter counts on that grant only
// once WAIT confirmed it. With the replica paused the waiter gets no lease;
// with it live the handed-over lease survives a failover.
func TestWaitReplicasFairHandoff(t *testing.T) {
	primary := testredis.Start(t)
	replica := testredis.StartReplica(t, primary)
	s := dial(t, primary.URL(), valkey.WithWaitReplicas(1, replicaWait))
	l := prototest.NewLocker(t, s, dlock.WithTTL(time.Minute))
	ctx := prototest.Context(t)
	queue := s.AuxKey("x", "fair:queue")

	// lockBehind queues a Lock of the fair lock behind the holder a and
	// releases a once it is queued, with the replica paused from then on
	// when pause is set.
	lockBehind := func(wait time.Duration, pause bool) (*dlock.Lease, error) {
		a, err := l.Fair("x").TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock = %v", err)
		}
		done := make(chan lockResult, 1)
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		go func() {
			b, err := l.Fair("x").Lock(wctx)
			done <- lockResult{lease: b, err: err}
		}()
		waitFor(t, "the waiter to queue", func() bool { return mustDo(t, primary, "ZCARD", queue) == "1" })
		if pause {
			replica.Pause()
			defer replica.Resume()
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("Release = %v", err)
		}
		r := <-done
		return r.lease, r.err
	}

	b, err := lockBehind(2*time.Second, true)
	if err == nil {
		b.Release(ctx)
		t.Fatalf("Lock behind a release with the replica paused returned a lease (fence %d); want an error", b.Fence())
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock behind a release with the replica paused = %v; want an error matching DeadlineExceeded", err)
	}
	// Every grant the waiter was refused confirmation of was released.
	waitFor(t, "the fair lock to be free", func() bool { return mustDo(t, primary, "EXISTS", s.AuxKey("x", "fair")) == "0" })

	b, err = lockBehind(10*time.Second, false)
	if err != nil {
		t.Fatalf("Lock behind a release with a live replica = %v", err)
	}
	promoted := failover(t, primary, replica)
	holder := mustDo(t, replica, "GET", s.AuxKey("x", "fair"))
	if want := strconv.FormatInt(b.Fence(), 10) + "|" + b.Token(); holder != want {
		t.Errorf("promoted replica's fair holder = %q, want %q (the handed-over lease)", holder, want)
	}
	if other, err := prototest.NewLocker(t, promoted).Fair("x").TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("TryLock on the promoted replica while the handed-over lease is valid = %v, %v; want ErrLocked", other, err)
	}
}

// TestWaitReplicasConfirmsOthersWrites: a success that writes nothing
// itself (a reentrant extension finding the TTL already long enough, set by
// another acquisition through another connection) must still wait until the
// replica has what it counts on. WAIT is documented to count the replicas
// that have its connection's own writes; Redis 7.0 counts from the
// connection's last command, which covers this case by itself, newer
// releases from its last write, which does not (see replicas.go).
func TestWaitReplicasConfirmsOthersWrites(t *testing.T) {
	primary := testredis.Start(t)
	replica := testredis.StartReplica(t, primary)
	sa := dial(t, primary.URL(), valkey.WithWaitReplicas(1, replicaWait))
	sb := dial(t, primary.URL(), valkey.WithWaitReplicas(1, replicaWait))
	ctx := prototest.Context(t)
	a := store.Request{Name: "r", Token: "token-a", Owner: "o", TTL: 10 * time.Second, Mode: store.ModeReentrant}
	b := a
	b.Token = "token-b"
	for _, x := range []struct {
		s   *valkey.Store
		req store.Request
	}{{sa, a}, {sb, b}} {
		if g, err := x.s.Acquire(ctx, x.req); err != nil || !g.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v; want a grant", x.req.Token, g, err)
		}
	}

	replica.Pause()
	defer replica.Resume()
	b.TTL = 2 * time.Minute
	wantNotReplicated(t, "Extend(b, 2m)", sb.Extend(ctx, []store.Request{b})[0])
	// The primary's TTL is now 2m: a's extension to 1m writes nothing.
	a.TTL = time.Minute
	wantNotReplicated(t, "Extend(a, 1m) counting on b's unconfirmed TTL", sa.Extend(ctx, []store.Request{a})[0])
}

// TestWaitReplicasRaiseFence: a raised fence is confirmed by the replica,
// or reported.
func TestWaitReplicasRaiseFence(t *testing.T) {
	primary := testredis.Start(t)
	replica := testredis.StartReplica(t, primary)
	s := dial(t, primary.URL(), valkey.WithWaitReplicas(1, replicaWait))
	ctx := prototest.Context(t)
	req := store.Request{Name: "f", Token: "token-a", TTL: time.Minute, Mode: store.ModeMutex}
	g, err := s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v; want a grant", g, err)
	}
	replica.Pause()
	err = s.RaiseFence(ctx, req, g.Fence+100)
	replica.Resume()
	wantNotReplicated(t, "RaiseFence", err)
	if err := s.RaiseFence(ctx, req, g.Fence+200); err != nil {
		t.Fatalf("RaiseFence with a live replica = %v", err)
	}
	if got, want := mustDo(t, replica, "GET", s.AuxKey("f", "fence")), strconv.FormatInt(g.Fence+200, 10); got != want {
		t.Errorf("replica's fence counter right after the confirmed raise = %s, want %s", got, want)
	}
}

// TestWaitReplicasExtendAcrossSlots: on a cluster, one Extend of names in
// several hash slots sends each slot's scripts with their own WAIT, on the
// connection of that slot's primary. These primaries have no replica, so
// each extension runs and is reported as unconfirmed.
func TestWaitReplicasExtendAcrossSlots(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	url := "redis://" + strings.Join(c.Addrs(), ",")
	plain := dial(t, url)
	s := dial(t, url, valkey.WithWaitReplicas(1, 50*time.Millisecond))
	ctx := prototest.Context(t)
	var reqs []store.Request
	for i := range 8 {
		req := store.Request{Name: "slot-" + strconv.Itoa(i), Token: "token-a", TTL: 10 * time.Second, Mode: store.ModeMutex}
		if g, err := plain.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v; want a grant", req.Name, g, err)
		}
		req.TTL = time.Minute
		reqs = append(reqs, req)
	}
	for i, err := range s.Extend(ctx, reqs) {
		var re *valkey.ReplicationError
		if !errors.As(err, &re) || re.Name != reqs[i].Name || re.Acked != 0 {
			t.Errorf("Extend(%s) on a primary without replicas = %v; want a *ReplicationError naming it, 0 of 1", reqs[i].Name, err)
		}
	}
	for _, req := range reqs {
		st, err := plain.State(ctx, req.Name)
		if err != nil || st.TTL <= 30*time.Second {
			t.Errorf("State(%s) after the unconfirmed extension = %+v, %v; want the new TTL kept by the server", req.Name, st, err)
		}
	}
}
