package etcd

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Ping implements [dlock.Pinger] with a linearizable read (it needs the
// cluster's quorum).
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.cli.Get(ctx, s.prefix+"ping", clientv3.WithCountOnly()); err != nil {
		return storeErr("ping", err)
	}
	return nil
}

func (s *Store) state(kind, name string, vw *view) dlock.State {
	st := dlock.State{Name: name, Mode: kindMode[kind]}
	if vw.fence != nil {
		st.Fence = vw.fence.ModRevision
	}
	for i, e := range vw.entries {
		if vw.holds(kind, i) {
			st.Holders++
			st.TTL = max(st.TTL, time.Duration(e.v.TTL)*time.Millisecond)
			if e.v.Mode == dlock.ModeWrite {
				st.Mode = dlock.ModeWrite
			}
			if kind == "s" {
				st.Limit = e.v.Limit
			}
		} else {
			st.Queue++
		}
	}
	if kind == "r" && st.Holders > 0 {
		st.Holders = 1
	}
	return st
}

// State implements [dlock.Inspector]: the first pattern of name with keys
// (mutex, reentrant, read-write, fair, semaphore). TTL is the longest lease
// a holder asked for, not its remaining time (etcd leases do not tell it
// below a second without another round trip per holder).
func (s *Store) State(ctx context.Context, name string) (dlock.State, error) {
	for _, k := range kinds {
		vw, err := s.read(ctx, k, name)
		if err != nil {
			return dlock.State{}, storeErr("state", err)
		}
		if len(vw.entries) > 0 {
			return s.state(k, name, vw), nil
		}
	}
	return dlock.State{Name: name}, nil
}

// List implements [dlock.Inspector]: every lock with a key, by name.
func (s *Store) List(ctx context.Context) ([]dlock.State, error) {
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
	type lk struct{ kind, name string }
	views := map[lk]*view{}
	var order []lk
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), base) // <kind>/<len>:<name>/<sub>/<token>
		kind, rest, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		ls, rest, ok := strings.Cut(rest, ":")
		n, err := strconv.Atoi(ls)
		if !ok || err != nil || n > len(rest) {
			continue
		}
		name, token := rest[:n], strings.TrimPrefix(rest[n:], "/")
		if len(token) < 2 || token[1] != '/' {
			continue
		}
		e := &entry{token: token[2:], kv: kv}
		if json.Unmarshal(kv.Value, &e.v) != nil {
			continue
		}
		k := lk{kind, name}
		if views[k] == nil {
			views[k] = &view{rev: tr.Header.Revision, fence: fences[nameKey("n", name)]}
			order = append(order, k)
		}
		views[k].entries = append(views[k].entries, e)
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].name != order[j].name {
			return order[i].name < order[j].name
		}
		return order[i].kind < order[j].kind
	})
	out := make([]dlock.State, 0, len(order))
	for _, k := range order {
		out = append(out, s.state(k.kind, k.name, views[k]))
	}
	return out, nil
}
