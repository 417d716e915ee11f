package valkey

import (
	"context"
	"sync"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
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

// EvalConfirmed implements redisproto.Confirmer: the calls, each round trip
// followed by the scratch write and WAIT, and for each call nil or the
// [*ReplicationError] of operation op. A cluster gets one round trip per
// hash slot of the calls, at once. A call the server did not know by SHA
// is sent again by EVAL in a round trip of its own, with its own WAIT.
func (d *driver) EvalConfirmed(ctx context.Context, op string, calls []redisproto.Call) ([]redisproto.Reply, []error) {
	res := make([]redisproto.Reply, len(calls))
	errs := make([]error, len(calls))
	c := d.direct(ctx)
	groups := d.bySlot(calls)
	if len(groups) == 1 {
		d.confirmSlot(ctx, c, op, calls, groups[0], res, errs)
		return res, errs
	}
	var wg sync.WaitGroup
	for _, which := range groups {
		wg.Go(func() { d.confirmSlot(ctx, c, op, calls, which, res, errs) })
	}
	wg.Wait()
	return res, errs
}

// bySlot groups the indexes of calls by the cluster hash slot of their
// keys: WAIT has no key, and valkey-go sends it with the commands of one
// slot. Off a cluster all calls are one group.
func (d *driver) bySlot(calls []redisproto.Call) [][]int {
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if len(calls) == 1 || d.c.Mode() != vk.ClientModeCluster {
		return [][]int{all}
	}
	at := make(map[uint16]int) // slot -> index in groups
	var groups [][]int
	for _, i := range all {
		c := d.cmd(calls[i], false)
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

// confirmSlot is EvalConfirmed for the calls which, all of one hash slot:
// it fills their entries of res and errs.
func (d *driver) confirmSlot(ctx context.Context, c vk.Client, op string, calls []redisproto.Call, which []int, res []redisproto.Reply, errs []error) {
	for eval, tries := false, 0; len(which) > 0; tries++ {
		syncKey := d.l.Aux(calls[which[0]].Name, syncSuffix)
		out := send(ctx, func(bool) []vk.ValkeyResult {
			cmds := make(vk.Commands, 0, len(which)+2)
			for _, i := range which {
				cmds = append(cmds, d.cmd(calls[i], eval))
			}
			cmds = append(cmds,
				d.c.B().Set().Key(syncKey).Value("").PxMilliseconds(1).Build(),
				d.c.B().Wait().Numreplicas(int64(d.waitReplicas)).Timeout(d.waitTimeout.Milliseconds()).Build())
			return c.DoMulti(ctx, cmds...)
		}, firstErr, nil)
		scratch, ack := out[len(which)], out[len(which)+1]
		var again, noScript []int
		for j, i := range which {
			switch {
			case tries < 2 && d.functionFailed(ctx, out[j].Error(), tries > 0, calls[i]):
				again = append(again, i)
			case !eval && isNoScript(out[j].Error()):
				noScript = append(noScript, i)
			default:
				res[i], errs[i] = reply(out[j]), d.replicated(op, calls[i].Name, scratch, ack)
			}
		}
		// The function's load first (FCALL again, or EVALSHA), then EVAL.
		which = again
		if len(again) == 0 {
			which, eval = noScript, true
		} else {
			which = append(which, noScript...)
		}
	}
}

// replicated returns nil when the answers to the scratch write and WAIT
// say that enough replicas have it, and otherwise the [*ReplicationError]
// of operation op on lock name.
func (d *driver) replicated(op, name string, scratch, ack vk.ValkeyResult) error {
	err := scratch.Error()
	var acked int64
	if err == nil {
		acked, err = ack.AsInt64()
	}
	if err == nil && acked >= int64(d.waitReplicas) {
		return nil
	}
	return &ReplicationError{Op: op, Name: name, Want: d.waitReplicas, Acked: int(acked), Err: err}
}
