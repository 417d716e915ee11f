package testredis

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// clusterSlots is the number of hash slots of a Redis Cluster.
	clusterSlots = 16384
	// clusterTimeout bounds the wait for a new cluster to agree it is ok.
	clusterTimeout = 60 * time.Second
	// replicaTimeout bounds the wait for a replica's link to its primary.
	replicaTimeout = 30 * time.Second
)

// A Cluster is a Redis Cluster started by [StartCluster]: masters, and the
// replicas [Cluster.AddReplica] adds.
type Cluster struct {
	nodes    []*Server
	replicas []*Server // added by AddReplica
}

// StartCluster starts masters cluster-enabled servers (see [WithCluster]),
// gives each an equal share of the 16384 slots in order, joins them with
// CLUSTER MEET and returns once every node reports cluster_state:ok and
// knows every other node. Any number of masters from 1 works. The nodes are
// killed when the test ends. It skips or fails tb as [Start] does.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	if masters < 1 {
		tb.Fatalf("testredis: StartCluster(%d): need at least one master", masters)
	}
	c := &Cluster{}
	for range masters {
		c.nodes = append(c.nodes, Start(tb, WithCluster()))
	}
	for i, n := range c.nodes {
		// Distinct config epochs up front spare the nodes a collision round.
		lo := i * clusterSlots / masters
		hi := (i+1)*clusterSlots/masters - 1
		for _, cmd := range [][]string{
			{"CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i + 1)},
			{"CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)},
		} {
			if _, err := n.Do(cmd...); err != nil {
				tb.Fatalf("testredis: node %s: %s: %v", n.Addr(), strings.Join(cmd, " "), err)
			}
		}
	}
	first := c.nodes[0]
	for _, n := range c.nodes[1:] {
		if _, err := n.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(first.Port()), strconv.Itoa(first.busPort)); err != nil {
			tb.Fatalf("testredis: node %s: CLUSTER MEET %s: %v", n.Addr(), first.Addr(), err)
		}
	}
	if err := c.wait(clusterTimeout); err != nil {
		tb.Fatalf("testredis: cluster of %d masters: %v", masters, err)
	}
	return c
}

// Wait waits, for up to 60 seconds, until every node reports
// cluster_state:ok, has every slot assigned and knows every other node, and
// fails tb if that does not happen. Use it after restarting a node: a master
// that restarts reports cluster_state:fail for a few seconds before it
// serves again.
func (c *Cluster) Wait(tb testing.TB) {
	tb.Helper()
	if err := c.wait(clusterTimeout); err != nil {
		tb.Fatalf("testredis: cluster %v: %v", c.Addrs(), err)
	}
}

// wait waits until every node is ok, has every slot and knows every node.
func (c *Cluster) wait(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) check() error {
	all := c.Servers()
	for _, n := range all {
		info, err := n.DoTimeout(time.Second, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("node %s: %v", n.Addr(), err)
		}
		for field, want := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": strconv.Itoa(clusterSlots),
			"cluster_slots_ok":       strconv.Itoa(clusterSlots),
			"cluster_known_nodes":    strconv.Itoa(len(all)),
		} {
			if got := infoField(info, field); got != want {
				return fmt.Errorf("node %s: %s = %q, want %q", n.Addr(), field, got, want)
			}
		}
		nodes, err := n.DoTimeout(time.Second, "CLUSTER", "NODES")
		if err != nil {
			return fmt.Errorf("node %s: %v", n.Addr(), err)
		}
		for line := range strings.Lines(nodes) {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			if flags := f[2]; strings.Contains(flags, "handshake") || strings.Contains(flags, "fail") || strings.Contains(flags, "noaddr") {
				return fmt.Errorf("node %s sees %s as %s", n.Addr(), f[1], flags)
			}
		}
	}
	return nil
}

// Addrs returns the nodes' addresses, "127.0.0.1:port", in slot order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the nodes, in slot order: node i serves slots
// [i*16384/n, (i+1)*16384/n).
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// StartReplica starts a server replicating primary (replicaof) with the
// defaults of [Start], and returns once its master_link_status is up, that
// is once the initial sync is done. It is killed when the test ends. It
// skips or fails tb as [Start] does.
func StartReplica(tb testing.TB, primary *Server) *Server {
	tb.Helper()
	r := Start(tb, WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())))
	deadline := time.Now().Add(replicaTimeout)
	for {
		info, err := r.DoTimeout(time.Second, "INFO", "replication")
		status := infoField(info, "master_link_status")
		if err == nil && status == "up" {
			return r
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testredis: replica %s of %s: master_link_status = %q (err %v) after %v\n%s\nprimary:\n%s",
				r.Addr(), primary.Addr(), status, err, replicaTimeout, r.LogTail(), primary.LogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
