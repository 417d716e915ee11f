package faults

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
)

// etcdCluster is a three-member etcd cluster (Debian's etcd-server) on
// loopback, started once for a group of scenarios and stopped by PID.
//
// Every peer link goes through a toxiproxy proxy of its own, one per
// ordered pair of members, so that one member can be cut off from the
// others while its clients still reach it. etcd dials one advertised peer
// URL per member, the same string for every member (member IDs are hashed
// from it), so the URL names a host, etcd-peer-<j>, and each member runs in
// a mount namespace of its own (unshare) whose /etc/hosts points that name,
// for member i, at 127.36.<i+1>.<j+1>: the address of the proxy from i to
// j. A member's own name points at 127.0.0.1, where it listens.
type etcdCluster struct {
	t       testing.TB
	path    string
	members []*etcdMember
	tp      *toxiproxy.ApiServer
	links   map[[2]int]*toxiproxy.Proxy // {from, to}: from's way to to's peer port
	cut     map[int]bool
}

type etcdMember struct {
	c                    *etcdCluster
	i                    int
	dir                  string
	clientPort, peerPort int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

const etcdMembers = 3

// startEtcdCluster starts the cluster and returns once every member
// answers /health (a leader is elected and reads go through it).
func startEtcdCluster(t testing.TB) *etcdCluster {
	t.Helper()
	path := etcdtest.Require(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("etcd cluster: unshare (util-linux) not found: %v", err)
	}
	if os.Geteuid() != 0 {
		// A mount namespace of one's own, and a bind mount in it, need
		// CAP_SYS_ADMIN.
		msg := "etcd cluster: the members' mount namespaces need root"
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("%s (CI=true: a failure, not a skip)", msg)
		}
		t.Skipf("%s (skipping; with CI=true this would fail)", msg)
	}
	c := &etcdCluster{t: t, path: path, links: map[[2]int]*toxiproxy.Proxy{}, cut: map[int]bool{}}
	c.tp = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	for i := range etcdMembers {
		m := &etcdMember{c: c, i: i, dir: t.TempDir()}
		var err error
		if m.clientPort, err = freeLoopbackPort(); err == nil {
			m.peerPort, err = freeLoopbackPort()
		}
		if err != nil {
			t.Fatal(err)
		}
		c.members = append(c.members, m)
		t.Cleanup(m.kill)
	}
	for _, from := range c.members {
		for _, to := range c.members {
			if from == to {
				continue
			}
			listen := net.JoinHostPort(c.linkIP(from.i, to.i), strconv.Itoa(to.peerPort))
			p := toxiproxy.NewProxy(c.tp, fmt.Sprintf("etcd-m%d-m%d", from.i, to.i), listen, "127.0.0.1:"+strconv.Itoa(to.peerPort))
			if err := p.Start(); err != nil {
				t.Fatalf("etcd cluster: proxy %s: %v", listen, err)
			}
			t.Cleanup(p.Stop)
			c.links[[2]int{from.i, to.i}] = p
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.members {
				t.Logf("etcd m%d log tail:\n%s", m.i, m.logTail())
			}
		}
	})
	token := fmt.Sprintf("dlock-faults-%d", os.Getpid())
	for _, m := range c.members {
		if err := m.launch(token); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range c.members {
		m.waitHealthy(t)
	}
	return c
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// linkIP is the loopback address of the proxy from member from to member to.
func (c *etcdCluster) linkIP(from, to int) string { return fmt.Sprintf("127.36.%d.%d", from+1, to+1) }

func peerHost(i int) string { return fmt.Sprintf("etcd-peer-%d", i) }

func (m *etcdMember) peerURL() string {
	return "http://" + net.JoinHostPort(peerHost(m.i), strconv.Itoa(m.peerPort))
}

// Endpoint is the member's client address, host:port.
func (m *etcdMember) Endpoint() string { return "127.0.0.1:" + strconv.Itoa(m.clientPort) }

func (m *etcdMember) dataDir() string { return filepath.Join(m.dir, "data") }

// launch starts the member (its data dir, if it holds one, wins over the
// initial-cluster flags, as on any etcd restart).
func (m *etcdMember) launch(token string) error {
	c := m.c
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n")
	var initial []string
	for _, o := range c.members {
		ip := "127.0.0.1"
		if o != m {
			ip = c.linkIP(m.i, o.i)
		}
		fmt.Fprintf(&hosts, "%s %s\n", ip, peerHost(o.i))
		initial = append(initial, fmt.Sprintf("m%d=%s", o.i, o.peerURL()))
	}
	hostsFile := filepath.Join(m.dir, "hosts")
	if err := os.WriteFile(hostsFile, []byte(hosts.String()), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(m.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	client := "http://" + m.Endpoint()
	// unshare execs sh, which execs etcd: one PID throughout.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, hostsFile,
		c.path,
		"--name", fmt.Sprintf("m%d", m.i),
		"--data-dir", m.dataDir(),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(m.peerPort),
		"--initial-advertise-peer-urls", m.peerURL(),
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-token", token,
		"--initial-cluster-state", "new",
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--logger", "zap",
		"--log-level", "warn",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcd m%d: %v", m.i, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	m.mu.Lock()
	m.cmd, m.exited = cmd, exited
	m.mu.Unlock()
	return nil
}

// waitHealthy waits, for at most 60 s, until the member answers /health
// with 200 (it has a leader and serves a linearizable read).
func (m *etcdMember) waitHealthy(t testing.TB) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m.mu.Lock()
		exited := m.exited
		m.mu.Unlock()
		select {
		case <-exited:
			t.Fatalf("etcd m%d exited:\n%s", m.i, m.logTail())
		default:
		}
		if resp, err := client.Get("http://" + m.Endpoint() + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("etcd m%d not healthy after 60s:\n%s", m.i, m.logTail())
}

func (m *etcdMember) logTail() string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "etcd.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// isLeader reads etcd_server_is_leader from the member's /metrics.
func (m *etcdMember) isLeader() bool {
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get("http://" + m.Endpoint() + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_server_is_leader "); ok {
			return strings.TrimSpace(v) == "1"
		}
	}
	return false
}

// leader waits, for at most 30 s, until exactly one of the members other
// than those in except reports itself leader, and returns it.
func (c *etcdCluster) leader(t testing.TB, except ...int) *etcdMember {
	t.Helper()
	skip := map[int]bool{}
	for _, i := range except {
		skip[i] = true
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var found []*etcdMember
		for _, m := range c.members {
			if !skip[m.i] && m.isLeader() {
				found = append(found, m)
			}
		}
		if len(found) == 1 {
			return found[0]
		}
	}
	t.Fatalf("etcd cluster: no single leader among the members after 30s")
	return nil
}

// others returns the members other than m.
func (c *etcdCluster) others(m *etcdMember) []*etcdMember {
	var out []*etcdMember
	for _, o := range c.members {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

func endpoints(ms ...*etcdMember) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Endpoint())
	}
	return out
}

// kill SIGKILLs the member by PID, if it runs, and waits for it.
func (m *etcdMember) kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// ensureRunning restarts the process if a scenario left it killed.
func (m *etcdMember) ensureRunning(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	running := m.cmd != nil
	m.mu.Unlock()
	if !running {
		m.restart(t)
	}
}

// restart starts a killed member again from its data dir and waits until
// it is healthy.
func (m *etcdMember) restart(t testing.TB) {
	t.Helper()
	m.kill()
	if err := m.launch(fmt.Sprintf("dlock-faults-%d", os.Getpid())); err != nil {
		t.Fatal(err)
	}
	m.waitHealthy(t)
}

// partition cuts member i off from the others: every connection on the
// peer links to and from it is reset (toxiproxy reset_peer, both ways), new
// ones as soon as they carry data. Its client port stays reachable.
func (c *etcdCluster) partition(t testing.TB, i int) {
	t.Helper()
	for k, p := range c.links {
		if k[0] == i || k[1] == i {
			for _, stream := range []string{"upstream", "downstream"} {
				if err := addToxic(p, "cut-"+stream, "reset_peer", stream, map[string]any{"timeout": 0}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	c.cut[i] = true
}

// heal removes every cut.
func (c *etcdCluster) heal(t testing.TB) {
	t.Helper()
	for i := range c.cut {
		for k, p := range c.links {
			if k[0] == i || k[1] == i {
				p.Toxics.ResetToxics(t.Context())
			}
		}
	}
	clear(c.cut)
}
