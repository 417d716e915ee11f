package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// startRedisCluster starts masters cluster-enabled servers under root,
// gives each an equal share of the slots in order, joins them and waits
// until every node reports cluster_state:ok and knows the others (as
// internal/testredis.StartCluster does for tests).
func startRedisCluster(ctx context.Context, root string, masters int) (cluster, error) {
	var c cluster
	fail := func(err error) (cluster, error) {
		for _, n := range c {
			n.stop()
		}
		return nil, err
	}
	for range masters {
		n, err := startNodeWith(root, true)
		if err != nil {
			return fail(err)
		}
		c = append(c, n)
	}
	for i, n := range c {
		lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		for _, cmd := range []vk.Completed{
			n.admin.B().Arbitrary("CLUSTER", "SET-CONFIG-EPOCH").Args(strconv.Itoa(i + 1)).Build(),
			n.admin.B().Arbitrary("CLUSTER", "ADDSLOTSRANGE").Args(strconv.Itoa(lo), strconv.Itoa(hi)).Build(),
		} {
			if err := n.admin.Do(ctx, cmd).Error(); err != nil {
				return fail(fmt.Errorf("cluster node %s: %w", n.addr, err))
			}
		}
	}
	for _, n := range c[1:] {
		cmd := n.admin.B().Arbitrary("CLUSTER", "MEET").Args("127.0.0.1", strconv.Itoa(c[0].port), strconv.Itoa(c[0].bus)).Build()
		if err := n.admin.Do(ctx, cmd).Error(); err != nil {
			return fail(fmt.Errorf("cluster node %s: MEET: %w", n.addr, err))
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := clusterReady(ctx, c)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(fmt.Errorf("cluster of %d masters not ready: %w", masters, err))
		}
		time.Sleep(50 * time.Millisecond) // polling external processes, bounded by deadline
	}
}

func clusterReady(ctx context.Context, c cluster) error {
	for _, n := range c {
		info, err := n.admin.Do(ctx, n.admin.B().ClusterInfo().Build()).ToString()
		if err != nil {
			return err
		}
		want := map[string]string{"cluster_state": "ok", "cluster_slots_ok": strconv.Itoa(clusterSlots), "cluster_known_nodes": strconv.Itoa(len(c))}
		got := map[string]string{}
		info = strings.TrimPrefix(info, "txt:") // a RESP3 verbatim string's format
		for line := range strings.Lines(info) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			got[k] = v
		}
		for k, w := range want {
			if got[k] != w {
				return fmt.Errorf("node %s: %s = %q, want %q", n.addr, k, got[k], w)
			}
		}
	}
	return nil
}

func clusterContenders() []contender {
	return []contender{
		{name: "raw-valkeygo", open: openRawCluster, note: "SET NX PX + compare-and-delete on one valkey-go cluster client"},
		{name: "dlock", open: openDlockCluster, note: "store/valkey on the cluster (valkey.Dial with every master), Mutex.Lock, fenced"},
	}
}

func openRawCluster(ctx context.Context, addrs []string) (locker, error) {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		return nil, err
	}
	return &rawLocker{clients: []vk.Client{c}, quorum: 1}, nil
}

func openDlockCluster(ctx context.Context, addrs []string) (locker, error) {
	st, err := valkey.Dial(ctx, "redis://"+strings.Join(addrs, ","))
	if err != nil {
		return nil, err
	}
	l, err := dlock.New(st, dlock.WithTTL(lockTTL))
	if err != nil {
		st.Close()
		return nil, err
	}
	return &dlockLocker{l: l, stores: []*valkey.Store{st}}, nil
}

// clusterThroughput runs W2 (64 goroutines, fresh names) for c on a Redis
// Cluster of masters nodes started for it, and reports the throughput, the
// CPU per operation (every master's, and this process's) and how the
// commands spread over the masters.
func clusterThroughput(ctx context.Context, c contender, masters int, cfg scaleConfig) (metrics, error) {
	nodes, err := startRedisCluster(ctx, scaleRoot, masters)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	before := make([]serverStats, len(nodes))
	for i, n := range nodes {
		if before[i], err = n.stats(ctx); err != nil {
			return nil, err
		}
	}
	m, err := throughput(ctx, c, nodes, 64, false, cfg.warm, cfg.dur)
	if err != nil {
		return nil, err
	}
	var total int64
	calls := make([]int64, len(nodes))
	for i, n := range nodes {
		st, err := n.stats(ctx)
		if err != nil {
			return nil, err
		}
		calls[i] = st.sub(before[i]).calls
		total += calls[i]
	}
	lo, hi := 1.0, 0.0
	for _, k := range calls {
		share := float64(k) / float64(max(total, 1))
		lo, hi = min(lo, share), max(hi, share)
	}
	m["masters"] = float64(masters)
	m["share_min"], m["share_max"] = lo, hi
	return m, nil
}
