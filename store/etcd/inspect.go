package etcd

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Ping implements [store.Pinger] with a linearizable read (it needs the
// cluster's quorum).
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.cli.Get(ctx, s.prefix+"ping", clientv3.WithCountOnly()); err != nil {
		return storeErr("ping", err)
	}
	return nil
}

func (s *Store) state(k kind, name string, vw *view) store.State {
	st := store.State{Name: name, Mode: k.mode()}
	st.Fence = lastFence(vw.fence)
	now := time.Now()
	for i, e := range vw.entries {
		if vw.claimed(k, i) {
			st.Holders++
			st.TTL = max(st.TTL, s.left(e, now))
			if e.v.Mode == store.ModeWrite {
				st.Mode = store.ModeWrite
			}
			if k == kindSemaphore {
				st.Limit = e.v.Limit
			}
		} else {
			st.Queue++
		}
	}
	if k == kindReentrant && st.Holders > 0 {
		st.Holders = 1
	}
	st.Owners = owners(k, vw)
	return st
}

// State implements [store.Inspector]: the first pattern of name with keys
// (mutex, reentrant, read-write, fair, semaphore, election). TTL is the
// longest lease a holder asked for, not its remaining time (etcd leases do
// not tell it below a second without another round trip per holder).
// Holders are the granted keys (a reentrant owner's keys are one hold),
// each with its record in Owners (Since: the granting process's wall
// clock); queue places, a fair queue's unclaimed head and a writer's
// intent included, count in Queue. A hold released before its MinHold
// stays a holder until it ends.
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	for _, k := range kinds {
		vw, err := s.read(ctx, k, name)
		if err != nil {
			return store.State{}, storeErr("state", err)
		}
		if len(vw.entries) > 0 {
			return s.state(k, name, vw), nil
		}
	}
	return store.State{Name: name}, nil
}

// List implements [store.Inspector]: every lock with a key, by name.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	base, fbase := s.prefix+"l/", s.prefix+"f/"
	tr, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(base, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(fbase, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, storeErr("list", err)
	}
	resp := tr.Responses[0].GetResponseRange()
	fences := map[string]*mvccpb.KeyValue{}
	for _, kv := range tr.Responses[1].GetResponseRange().Kvs {
		fences[strings.TrimPrefix(string(kv.Key), fbase)] = kv
	}
	type lk struct {
		kind kind
		name string
	}
	views := map[lk]*view{}
	var order []lk
	for _, kv := range resp.Kvs {
		k, name, token, ok := parseLockKey(strings.TrimPrefix(string(kv.Key), base))
		if !ok {
			continue
		}
		e := &entry{token: token, kv: kv}
		if json.Unmarshal(kv.Value, &e.v) != nil {
			continue
		}
		l := lk{k, name}
		if views[l] == nil {
			views[l] = &view{rev: tr.Header.Revision, fence: fences[nameKey(fenceSegment, name)]}
			order = append(order, l)
		}
		views[l].entries = append(views[l].entries, e)
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].name != order[j].name {
			return order[i].name < order[j].name
		}
		return order[i].kind.segment() < order[j].kind.segment() // as the keys sort
	})
	out := make([]store.State, 0, len(order))
	for _, l := range order {
		out = append(out, s.state(l.kind, l.name, views[l]))
	}
	return out, nil
}

// parseLockKey splits rest, a lock key after <prefix>l/, into the kind,
// name and token of <kind>/<len>:<name>/<sub>/<token>; ok is false for a
// key of another shape or kind.
func parseLockKey(rest string) (k kind, name, token string, ok bool) {
	seg, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, "", "", false
	}
	if k, ok = kindOfSegment(seg); !ok {
		return 0, "", "", false
	}
	ls, rest, ok := strings.Cut(rest, ":")
	n, err := strconv.Atoi(ls)
	if !ok || err != nil || n > len(rest) {
		return 0, "", "", false
	}
	name, token = rest[:n], strings.TrimPrefix(rest[n:], "/")
	if len(token) < 2 || token[1] != '/' {
		return 0, "", "", false
	}
	return k, name, token[2:], true
}
