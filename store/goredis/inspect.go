package goredis

import (
	"context"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// State implements [store.Inspector] in one round trip (two for a pattern
// other than the mutex). A free lock has no holders; Fence is the last
// fence issued (0 once the counter expired). It never reveals tokens.
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	if err := s.l.CheckName(name); err != nil {
		return store.State{}, err
	}
	v, err := s.run(ctx, redisproto.StateScript, s.l.StateKeys(name), nil).Slice()
	if err != nil {
		return store.State{}, fail("state", err)
	}
	st := store.State{Name: name}
	if len(v) < 4 {
		return st, nil
	}
	typ, _ := v[0].(string)
	ints := make([]int64, 4)
	for i := range ints {
		if i+1 < len(v) {
			ints[i], _ = v[i+1].(int64)
		}
	}
	st, pattern := redisproto.DecodeState(st, typ, ints[0], ints[1], ints[2], ints[3])
	if !pattern {
		return st, nil
	}
	p, err := s.run(ctx, redisproto.PatternStateScript, s.l.PatternStateKeys(name), nil).Int64Slice()
	if err != nil {
		return store.State{}, fail("state", err)
	}
	return redisproto.DecodePatternState(st, p), nil
}

// List implements [store.Inspector]: the state of every held lock whose key
// has the Store's prefix, by name. It SCANs every master, so it costs time
// in proportion to the whole keyspace; it is meant for dashboards and
// tools, not hot paths.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	var mu sync.Mutex
	seen := make(map[string]bool)
	var names []string
	err := s.eachMaster(ctx, func(ctx context.Context, c redis.Cmdable, _ string) error {
		for _, match := range []string{s.l.ListPattern(), redisproto.AuxPattern} {
			it := c.Scan(ctx, 0, match, 1000).Iterator()
			for it.Next(ctx) {
				k := it.Val()
				name, ok := s.l.MainName(k)
				if !ok {
					name, ok = s.l.PatternName(k)
				}
				mu.Lock()
				if ok && !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
				mu.Unlock()
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fail("list", err)
	}
	sort.Strings(names)
	out := make([]store.State, 0, len(names))
	for _, name := range names {
		st, err := s.State(ctx, name)
		if err != nil {
			return nil, err
		}
		if st.Holders > 0 || st.Queue > 0 {
			out = append(out, st)
		}
	}
	return out, nil
}

// eachMaster calls fn with a client of each master: every master of a
// cluster, every shard of a ring, or the client itself.
func (s *Store) eachMaster(ctx context.Context, fn func(ctx context.Context, c redis.Cmdable, addr string) error) error {
	node := func(ctx context.Context, c *redis.Client) error { return fn(ctx, c, c.Options().Addr) }
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, node)
	case *redis.Ring:
		return c.ForEachShard(ctx, node)
	case *redis.Client:
		return node(ctx, c)
	}
	return fn(ctx, s.client, "")
}

// Ping implements [store.Pinger]: PING to the server (to one node of a
// cluster). It returns a [*store.StoreError] when that fails.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fail("ping", err)
	}
	return nil
}

// checkEviction reads every master's maxmemory-policy and warns about (or,
// strict, refuses) a policy that may evict lock keys. Nodes that do not
// answer CONFIG GET are logged and skipped.
func (s *Store) checkEviction(ctx context.Context) error {
	var mu sync.Mutex
	var bad *EvictionError
	s.eachMaster(ctx, func(ctx context.Context, c redis.Cmdable, addr string) error {
		m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		policy, ok := m["maxmemory-policy"]
		if err != nil || !ok {
			s.cfg.logger.Info("dlock: could not read maxmemory-policy; make sure it is noeviction", "node", addr, "err", err)
			return nil
		}
		if policy == "noeviction" {
			return nil
		}
		if s.cfg.strictEvict {
			mu.Lock()
			if bad == nil || addr < bad.Node {
				bad = &EvictionError{Node: addr, Policy: policy}
			}
			mu.Unlock()
			return nil
		}
		s.cfg.logger.Warn("dlock: maxmemory-policy may evict lock keys, freeing held locks; set it to noeviction",
			"node", addr, "policy", policy)
		return nil
	})
	if bad != nil {
		return bad
	}
	return nil
}
