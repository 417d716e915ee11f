package faults

import (
	"fmt"
	"io"
	"net"
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

	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// zkEnsemble is a three-server ZooKeeper ensemble (Debian's zookeeper, run
// as QuorumPeerMain on the JVM) on loopback, started once for a group of
// scenarios and stopped by PID.
//
// Each server has a zoo.cfg of its own, and in it every other server's
// quorum and election addresses are those of toxiproxy proxies of its own
// (one per ordered pair of servers and port), so that one server can be cut
// off from the others while its clients still reach it. With reconfig off
// (ZooKeeper's default) a server keeps the addresses of its own config.
type zkEnsemble struct {
	t       testing.TB
	java    string
	jar     string
	servers []*zkServer
	tp      *toxiproxy.ApiServer
	links   map[[2]int][]*toxiproxy.Proxy // {from, to}: from's way to to's quorum and election ports
	cut     map[int]bool
}

type zkServer struct {
	z                          *zkEnsemble
	i                          int // myid is i+1
	dir                        string
	clientPort, quorum, elect  int
	proxyQuorum, proxyElection map[int]string // by server: this server's address of its ports

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

const zkServers = 3

// startZKEnsemble starts the ensemble and returns once every server serves
// requests (a leader is elected and the followers have synced).
func startZKEnsemble(t testing.TB) *zkEnsemble {
	t.Helper()
	java, jar := zktest.Require(t)
	z := &zkEnsemble{t: t, java: java, jar: jar, links: map[[2]int][]*toxiproxy.Proxy{}, cut: map[int]bool{}}
	z.tp = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	for i := range zkServers {
		s := &zkServer{z: z, i: i, dir: t.TempDir(), proxyQuorum: map[int]string{}, proxyElection: map[int]string{}}
		for _, p := range []*int{&s.clientPort, &s.quorum, &s.elect} {
			var err error
			if *p, err = freeLoopbackPort(); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "data", "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		z.servers = append(z.servers, s)
		t.Cleanup(s.kill)
	}
	for _, from := range z.servers {
		for _, to := range z.servers {
			if from == to {
				continue
			}
			for _, port := range []int{to.quorum, to.elect} {
				p := toxiproxy.NewProxy(z.tp, fmt.Sprintf("zk-s%d-s%d-%d", from.i, to.i, port), "127.0.0.1:0", "127.0.0.1:"+strconv.Itoa(port))
				if err := p.Start(); err != nil {
					t.Fatalf("zk ensemble: proxy: %v", err)
				}
				t.Cleanup(p.Stop)
				z.links[[2]int{from.i, to.i}] = append(z.links[[2]int{from.i, to.i}], p)
				if port == to.quorum {
					from.proxyQuorum[to.i] = p.Listen
				} else {
					from.proxyElection[to.i] = p.Listen
				}
			}
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range z.servers {
				t.Logf("zookeeper s%d log tail:\n%s", s.i, s.logTail())
			}
		}
	})
	for _, s := range z.servers {
		if err := s.launch(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range z.servers {
		s.waitServing(t)
	}
	return z
}

func (s *zkServer) launch() error {
	var servers strings.Builder
	for _, o := range s.z.servers {
		q, e := "127.0.0.1:"+strconv.Itoa(o.quorum), "127.0.0.1:"+strconv.Itoa(o.elect)
		if o != s {
			q, e = s.proxyQuorum[o.i], s.proxyElection[o.i]
		}
		fmt.Fprintf(&servers, "server.%d=%s:%s\n", o.i+1, q, portOf(e))
	}
	// tickTime 100ms: a follower cut off from its leader for syncLimit
	// ticks (1s) drops out; sessions may be 200ms to 60s.
	conf := fmt.Sprintf(`tickTime=100
initLimit=20
syncLimit=10
minSessionTimeout=200
maxSessionTimeout=60000
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr
forceSync=no
reconfigEnabled=false
standaloneEnabled=false
%s`, filepath.Join(s.dir, "data"), s.clientPort, servers.String())
	cfg := filepath.Join(s.dir, "zoo.cfg")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "zookeeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.z.java,
		"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-Dzookeeper.admin.enableServer=false",
		// A dead peer's proxy accepts and then closes: give up on an
		// election connection after 1s (default 5s), and re-send
		// election notifications at least every second (default up
		// to 60s), so that an election on a loaded machine takes
		// seconds, not tens of seconds.
		"-Dzookeeper.cnxTimeout=1000",
		"-Dzookeeper.fastleader.maxNotificationInterval=1000",
		"-cp", s.z.jar, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("zookeeper s%d: %v", s.i, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return nil
}

// portOf returns the port of host:port.
func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// Addr is the server's client address, host:port.
func (s *zkServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.clientPort) }

// mode asks the server "srvr" and returns its Mode (leader, follower), or
// "" when it does not serve requests.
func (s *zkServer) mode() string {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return ""
	}
	b, _ := io.ReadAll(c)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// waitServing waits, for at most 90 s (three JVMs on two loaded cores),
// until the server serves requests as leader or follower.
func (s *zkServer) waitServing(t testing.TB) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		exited := s.exited
		s.mu.Unlock()
		select {
		case <-exited:
			t.Fatalf("zookeeper s%d exited:\n%s", s.i, s.logTail())
		default:
		}
		if m := s.mode(); m == "leader" || m == "follower" {
			return
		}
	}
	t.Fatalf("zookeeper s%d not serving after 90s:\n%s", s.i, s.logTail())
}

func (s *zkServer) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "zookeeper.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// leader waits, for at most 60 s, until exactly one server other than
// those in except says it leads, and returns it.
func (z *zkEnsemble) leader(t testing.TB, except ...int) *zkServer {
	t.Helper()
	skip := map[int]bool{}
	for _, i := range except {
		skip[i] = true
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var found []*zkServer
		for _, s := range z.servers {
			if !skip[s.i] && s.mode() == "leader" {
				found = append(found, s)
			}
		}
		if len(found) == 1 {
			return found[0]
		}
	}
	t.Fatalf("zk ensemble: no single leader after 60s")
	return nil
}

func (z *zkEnsemble) others(s *zkServer) []*zkServer {
	var out []*zkServer
	for _, o := range z.servers {
		if o != s {
			out = append(out, o)
		}
	}
	return out
}

func zkAddrs(ss ...*zkServer) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Addr())
	}
	return out
}

// kill SIGKILLs the server by PID, if it runs, and waits for it.
func (s *zkServer) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// ensureRunning restarts the process if a scenario left it killed.
func (s *zkServer) ensureRunning(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if !running {
		s.restart(t)
	}
}

// restart starts a killed server again from its data dir and waits until
// it serves.
func (s *zkServer) restart(t testing.TB) {
	t.Helper()
	s.kill()
	if err := s.launch(); err != nil {
		t.Fatal(err)
	}
	s.waitServing(t)
}

// partition cuts server i off from the others: every connection on the
// quorum and election links to and from it is reset (toxiproxy reset_peer,
// both ways), new ones as soon as they carry data. Its client port stays
// reachable.
func (z *zkEnsemble) partition(t testing.TB, i int) {
	t.Helper()
	for k, ps := range z.links {
		if k[0] != i && k[1] != i {
			continue
		}
		for _, p := range ps {
			for _, stream := range []string{"upstream", "downstream"} {
				if err := addToxic(p, "cut-"+stream, "reset_peer", stream, map[string]any{"timeout": 0}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	z.cut[i] = true
}

// heal removes every cut.
func (z *zkEnsemble) heal(t testing.TB) {
	t.Helper()
	for i := range z.cut {
		for k, ps := range z.links {
			if k[0] == i || k[1] == i {
				for _, p := range ps {
					p.Toxics.ResetToxics(t.Context())
				}
			}
		}
	}
	clear(z.cut)
}
