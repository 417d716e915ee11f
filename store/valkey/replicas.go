package valkey

import (
	"context"
	"sync"

	vk "github.com/valkey-io/valkey-go"
)

// Under [WithWaitReplicas] every call whose success a client counts on (a
// grant, an extension, a raised fence) is confirmed by WAIT in the same
// round trip, on the same connection.
//
// WAIT is documented to count the replicas that have the connection's own
// earlier writes. A script that succeeds without writing (a reentrant
// extension finding the TTL already long enough, set by another
// acquisition) relies on a write another connection made, which may not be
// confirmed; so does a waiter's first Acquire after a handoff, written by
// the releaser (today that Acquire refreshes the TTL, a write of its own).
// Redis 7.0 counts from the connection's last command of any kind, which
// covers those; a server may count from its last write only, as
// documented (newer Redis releases do). So each round trip sets a scratch
// key of the lock's slot between the scripts and WAIT: WAIT then counts
// the replicas that have everything the server had written when it ran
// the scripts, whoever wrote it.

// syncSuffix is the auxiliary key suffix of that scratch key: it lives a
// millisecond, and no script reads it.
const syncSuffix = "sync"

// confirmed runs the calls built by build (by EVAL when eval is set) on
// lock names (one per call), each round trip followed by the scratch write
// and WAIT, and returns their replies and, for each, nil or the
// [*ReplicationError] of operation op. A cluster gets one round trip per
// hash slot of the calls, at once. A call the server did not know by SHA is
// sent again by EVAL in a round trip of its own, with its own WAIT.
func (s *Store) confirmed(ctx context.Context, op string, names []string, build func(i int, eval bool) vk.Completed) ([]vk.ValkeyResult, []error) {
	res := make([]vk.ValkeyResult, len(names))
	errs := make([]error, len(names))
	c := s.direct(ctx)
	groups := s.bySlot(len(names), build)
	if len(groups) == 1 {
		s.confirmSlot(ctx, c, op, names, groups[0], build, res, errs)
		return res, errs
	}
	var wg sync.WaitGroup
	for _, which := range groups {
		wg.Go(func() { s.confirmSlot(ctx, c, op, names, which, build, res, errs) })
	}
	wg.Wait()
	return res, errs
}

// bySlot groups the indexes of n calls by the cluster hash slot of their
// keys: WAIT has no key, and valkey-go sends it with the commands of one
// slot. Off a cluster all calls are one group.
func (s *Store) bySlot(n int, build func(i int, eval bool) vk.Completed) [][]int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if n == 1 || s.client.Mode() != vk.ClientModeCluster {
		return [][]int{all}
	}
	at := make(map[uint16]int) // slot -> index in groups
	var groups [][]int
	for _, i := range all {
		c := build(i, false)
		slot := c.Slot()
		g, ok := at[slot]
		if !ok {
			g = len(groups)
			at[slot] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// confirmSlot is confirmed for the calls which, all of one hash slot: it
// fills their entries of res and errs.
func (s *Store) confirmSlot(ctx context.Context, c vk.Client, op string, names []string, which []int, build func(i int, eval bool) vk.Completed, res []vk.ValkeyResult, errs []error) {
	for eval := false; len(which) > 0; eval = true {
		syncKey := s.l.Aux(names[which[0]], syncSuffix)
		out := send(ctx, func(bool) []vk.ValkeyResult {
			cmds := make(vk.Commands, 0, len(which)+2)
			for _, i := range which {
				cmds = append(cmds, build(i, eval))
			}
			cmds = append(cmds,
				s.client.B().Set().Key(syncKey).Value("").PxMilliseconds(1).Build(),
				s.client.B().Wait().Numreplicas(int64(s.cfg.waitReplicas)).Timeout(s.cfg.waitTimeout.Milliseconds()).Build())
			return c.DoMulti(ctx, cmds...)
		}, firstErr, nil)
		scratch, ack := out[len(which)], out[len(which)+1]
		var again []int
		for j, i := range which {
			if !eval && isNoScript(out[j].Error()) {
				again = append(again, i)
				continue
			}
			res[i], errs[i] = out[j], s.replicated(op, names[i], scratch, ack)
		}
		which = again
	}
}

// replicated returns nil when the answers to the scratch write and WAIT
// say that enough replicas have it, and otherwise the [*ReplicationError]
// of operation op on lock name.
func (s *Store) replicated(op, name string, scratch, ack vk.ValkeyResult) error {
	err := scratch.Error()
	var acked int64
	if err == nil {
		acked, err = ack.AsInt64()
	}
	if err == nil && acked >= int64(s.cfg.waitReplicas) {
		return nil
	}
	return &ReplicationError{Op: op, Name: name, Want: s.cfg.waitReplicas, Acked: int(acked), Err: err}
}
