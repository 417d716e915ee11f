package testredis

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// AddReplica starts a cluster-enabled server (opts as for [Start]), joins it
// to c with CLUSTER MEET, makes it a replica of master (CLUSTER REPLICATE),
// and returns once its link to master is up and every node of c, the new
// one included, is ok and knows every other. It is killed when the test
// ends. It skips or fails tb as [Start] does.
func (c *Cluster) AddReplica(tb testing.TB, master *Server, opts ...Option) *Server {
	tb.Helper()
	r := Start(tb, append([]Option{WithCluster()}, opts...)...)
	if _, err := r.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(master.Port()), strconv.Itoa(master.busPort)); err != nil {
		tb.Fatalf("testredis: node %s: CLUSTER MEET %s: %v", r.Addr(), master.Addr(), err)
	}
	id := master.ClusterID(tb)
	deadline := time.Now().Add(clusterTimeout)
	for {
		// REPLICATE needs the node to know master, which the handshake
		// of MEET takes a moment to learn.
		_, err := r.Do("CLUSTER", "REPLICATE", id)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testredis: node %s: CLUSTER REPLICATE %s: %v", r.Addr(), id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.replicas = append(c.replicas, r)
	waitLink(tb, r)
	c.Wait(tb)
	return r
}

// waitLink waits until replica's master_link_status is up.
func waitLink(tb testing.TB, r *Server) {
	tb.Helper()
	deadline := time.Now().Add(replicaTimeout)
	for {
		info, err := r.DoTimeout(time.Second, "INFO", "replication")
		status := infoField(info, "master_link_status")
		if err == nil && status == "up" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testredis: replica %s: master_link_status = %q (err %v) after %v\n%s",
				r.Addr(), status, err, replicaTimeout, r.LogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ClusterID returns the cluster node ID of s (CLUSTER MYID), failing tb
// when s does not answer it.
func (s *Server) ClusterID(tb testing.TB) string {
	tb.Helper()
	id, err := s.Do("CLUSTER", "MYID")
	if err != nil || id == "" {
		tb.Fatalf("testredis: node %s: CLUSTER MYID = %q, %v", s.Addr(), id, err)
	}
	return id
}

// Servers returns every server of c: the masters it started with, in slot
// order, then the replicas in the order they were added (roles change with
// failovers: see [Cluster.Owner]).
func (c *Cluster) Servers() []*Server {
	return append(c.Nodes(), c.replicas...)
}

// byPort returns the server of c that listens on port.
func (c *Cluster) byPort(port int) *Server {
	for _, s := range c.Servers() {
		if s.Port() == port {
			return s
		}
	}
	return nil
}

// Owner returns the master that serves slot now and its replicas, as the
// CLUSTER NODES of a running node of c (the first that answers) says:
// roles change with failovers and slots with migrations. It fails tb when
// no node answers or none serves slot.
func (c *Cluster) Owner(tb testing.TB, slot int) (master *Server, replicas []*Server) {
	tb.Helper()
	var nodes string
	var err error
	for _, s := range c.Servers() {
		if nodes, err = s.DoTimeout(time.Second, "CLUSTER", "NODES"); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("testredis: CLUSTER NODES: no node answers: %v", err)
	}
	type node struct {
		srv      *Server
		masterID string
		master   bool
		slots    []string
	}
	ids := map[string]node{}
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		host, _, _ := strings.Cut(f[1], "@")
		_, port, _ := strings.Cut(host, ":")
		p, _ := strconv.Atoi(port)
		ids[f[0]] = node{srv: c.byPort(p), masterID: f[3], master: strings.Contains(f[2], "master"), slots: f[8:]}
	}
	var mid string
	for id, n := range ids {
		if n.master && servesSlot(n.slots, slot) {
			mid, master = id, n.srv
		}
	}
	if master == nil {
		tb.Fatalf("testredis: no node of the cluster serves slot %d:\n%s", slot, nodes)
	}
	for _, n := range ids {
		if n.masterID == mid && n.srv != nil {
			replicas = append(replicas, n.srv)
		}
	}
	return master, replicas
}

// servesSlot reports whether the slot fields of a CLUSTER NODES line
// ("0-5460", "5461", "[93->-id]") cover slot.
func servesSlot(fields []string, slot int) bool {
	for _, f := range fields {
		if strings.HasPrefix(f, "[") {
			continue
		}
		lo, hi, ok := strings.Cut(f, "-")
		if !ok {
			hi = lo
		}
		l, err1 := strconv.Atoi(lo)
		h, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && l <= slot && slot <= h {
			return true
		}
	}
	return false
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT on a running node).
func (c *Cluster) Slot(tb testing.TB, key string) int {
	tb.Helper()
	for _, s := range c.Servers() {
		if v, err := s.DoTimeout(time.Second, "CLUSTER", "KEYSLOT", key); err == nil {
			n, err := strconv.Atoi(v)
			if err != nil {
				tb.Fatalf("testredis: CLUSTER KEYSLOT %s = %q", key, v)
			}
			return n
		}
	}
	tb.Fatalf("testredis: CLUSTER KEYSLOT %s: no node answers", key)
	return 0
}

// A Migration moves one hash slot from one master to another the way
// redis-cli --cluster reshard does, a step at a time, so that a test can
// act between the steps: [Cluster.BeginMigration] marks the slot
// IMPORTING on the target and MIGRATING on the source, [Migration.Move]
// MIGRATEs given keys (with their TTLs), and [Migration.Finish] moves what
// is left and assigns the slot to the target on every master.
type Migration struct {
	c        *Cluster
	slot     int
	from, to *Server
}

// BeginMigration starts moving slot from master from to master to.
func (c *Cluster) BeginMigration(tb testing.TB, slot int, from, to *Server) *Migration {
	tb.Helper()
	m := &Migration{c: c, slot: slot, from: from, to: to}
	s := strconv.Itoa(slot)
	mustDo(tb, to, "CLUSTER", "SETSLOT", s, "IMPORTING", from.ClusterID(tb))
	mustDo(tb, from, "CLUSTER", "SETSLOT", s, "MIGRATING", to.ClusterID(tb))
	return m
}

// Move MIGRATEs keys, one MIGRATE each, in order, from the source to the
// target (each keeps its remaining TTL; a key already gone is skipped).
func (m *Migration) Move(tb testing.TB, keys ...string) {
	tb.Helper()
	for _, k := range keys {
		mustDo(tb, m.from, "MIGRATE", "127.0.0.1", strconv.Itoa(m.to.Port()), k, "0", "10000")
	}
}

// Finish MIGRATEs every key left in the slot on the source and assigns the
// slot to the target: CLUSTER SETSLOT NODE on the target, the source, then
// every other master, as redis-cli does.
func (m *Migration) Finish(tb testing.TB) {
	tb.Helper()
	s := strconv.Itoa(m.slot)
	for {
		keys, err := m.from.Do("CLUSTER", "GETKEYSINSLOT", s, "100")
		if err != nil {
			tb.Fatalf("testredis: node %s: CLUSTER GETKEYSINSLOT %s: %v", m.from.Addr(), s, err)
		}
		if keys == "" {
			break
		}
		args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(m.to.Port()), "", "0", "10000", "KEYS"}
		mustDo(tb, m.from, append(args, strings.Split(keys, "\n")...)...)
	}
	id := m.to.ClusterID(tb)
	mustDo(tb, m.to, "CLUSTER", "SETSLOT", s, "NODE", id)
	mustDo(tb, m.from, "CLUSTER", "SETSLOT", s, "NODE", id)
	for _, n := range m.c.Servers() {
		if n == m.to || n == m.from {
			continue
		}
		if role, err := n.DoTimeout(time.Second, "ROLE"); err == nil && strings.HasPrefix(role, "master") {
			mustDo(tb, n, "CLUSTER", "SETSLOT", s, "NODE", id)
		}
	}
}

// mustDo runs a command on s and fails tb on an error.
func mustDo(tb testing.TB, s *Server, args ...string) string {
	tb.Helper()
	v, err := s.Do(args...)
	if err != nil {
		tb.Fatalf("testredis: node %s: %s: %v", s.Addr(), strings.Join(args, " "), err)
	}
	return v
}

// String names a migration in messages.
func (m *Migration) String() string {
	return fmt.Sprintf("slot %d %s -> %s", m.slot, m.from.Addr(), m.to.Addr())
}
