package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	vk "github.com/valkey-io/valkey-go"
)

// node is one redis-server process that the driver started on a free
// loopback port, with an admin client for INFO, FLUSHALL and PING.
type node struct {
	addr  string
	dir   string
	cmd   *exec.Cmd
	admin vk.Client
	done  chan struct{}
	port  int
	bus   int // cluster bus port, 0 off a cluster
}

// redisPath returns the redis-server binary: the one in PATH, else the
// first of the usual Debian locations.
func redisPath() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("bench: redis-server not found (apt-get install -y redis-server)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startNode starts a redis-server without persistence on 127.0.0.1 in a
// directory under root and waits until it answers PING. The kernel kills it
// if the driver dies (Pdeathsig); stop kills it by PID.
func startNode(root string) (*node, error) {
	return startNodeWith(root, false)
}

// startNodeWith is startNode; with cluster set the server runs with
// cluster-enabled yes and its cluster bus on a second free port, and
// serves nothing until startRedisCluster joins it and gives it slots.
func startNodeWith(root string, cluster bool) (*node, error) {
	path, err := redisPath()
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(root, "redis-"+strconv.Itoa(port))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		logf, err := os.Create(filepath.Join(dir, "redis.log"))
		if err != nil {
			return nil, err
		}
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--protected-mode", "no"}
		var bus int
		if cluster {
			if bus, err = freePort(); err != nil {
				return nil, err
			}
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus))
		}
		cmd := exec.Command(path, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, err
		}
		logf.Close()
		n := &node{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd, done: make(chan struct{}), port: port, bus: bus}
		go func() { _ = cmd.Wait(); close(n.done) }()
		if last = n.waitReady(10 * time.Second); last == nil {
			n.admin, last = vk.NewClient(vk.ClientOption{InitAddress: []string{n.addr}, DisableCache: true, ForceSingleClient: true})
			if last == nil {
				return n, nil
			}
		}
		n.stop()
	}
	return nil, fmt.Errorf("bench: redis-server did not start: %w", last)
}

func (n *node) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-n.done:
			log, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			return fmt.Errorf("redis-server exited: %s", tail(string(log), 400))
		default:
		}
		c, err := net.DialTimeout("tcp", n.addr, 200*time.Millisecond)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
			var line string
			if err == nil {
				line, err = bufio.NewReader(c).ReadString('\n')
			}
			c.Close()
			if err == nil && strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG from %s within %v (last: %v)", n.addr, timeout, err)
		}
		time.Sleep(10 * time.Millisecond) // polling an external process, bounded by deadline
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// stop kills the server by PID and waits for it to exit.
func (n *node) stop() {
	if n.admin != nil {
		n.admin.Close()
	}
	if n.cmd.Process != nil {
		n.cmd.Process.Kill()
	}
	<-n.done
	os.RemoveAll(n.dir)
}

func (n *node) flush(ctx context.Context) error {
	return n.admin.Do(ctx, n.admin.B().Flushall().Build()).Error()
}

// serverStats is what INFO says about the work a server did.
type serverStats struct {
	calls int64   // commands run, those run inside scripts included, INFO excluded
	cpu   float64 // used_cpu_user + used_cpu_sys, seconds
	byCmd map[string]int64
}

func (s serverStats) sub(o serverStats) serverStats {
	return serverStats{calls: s.calls - o.calls, cpu: s.cpu - o.cpu, byCmd: mergeCmds(s.byCmd, o.byCmd, -1)}
}

func (s serverStats) add(o serverStats) serverStats {
	return serverStats{calls: s.calls + o.calls, cpu: s.cpu + o.cpu, byCmd: mergeCmds(s.byCmd, o.byCmd, 1)}
}

// mergeCmds returns a + sign*b, by command.
func mergeCmds(a, b map[string]int64, sign int64) map[string]int64 {
	out := make(map[string]int64, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] += sign * v
	}
	return out
}

// stats reads INFO commandstats and INFO cpu.
func (n *node) stats(ctx context.Context) (serverStats, error) {
	var st serverStats
	info, err := n.admin.Do(ctx, n.admin.B().Info().Section("commandstats").Section("cpu").Section("stats").Build()).ToString()
	if err != nil {
		return st, err
	}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "cmdstat_"):
			name, rest, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			if name == "info" {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			v, _ := strconv.ParseInt(calls, 10, 64)
			st.calls += v
			if st.byCmd == nil {
				st.byCmd = map[string]int64{}
			}
			st.byCmd[name] = v
		case strings.HasPrefix(line, "total_connections_received:"):
			_, v, _ := strings.Cut(line, ":")
			n, _ := strconv.ParseInt(v, 10, 64)
			if st.byCmd == nil {
				st.byCmd = map[string]int64{}
			}
			st.byCmd["(connections)"] = n
		case strings.HasPrefix(line, "used_cpu_user:"), strings.HasPrefix(line, "used_cpu_sys:"):
			_, v, _ := strings.Cut(line, ":")
			f, _ := strconv.ParseFloat(v, 64)
			st.cpu += f
		}
	}
	return st, nil
}

// cluster is a set of nodes used together by one cell.
type cluster []*node

func (c cluster) addrs() []string {
	a := make([]string, len(c))
	for i, n := range c {
		a[i] = n.addr
	}
	return a
}

func (c cluster) flush(ctx context.Context) error {
	for _, n := range c {
		if err := n.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (c cluster) stats(ctx context.Context) (serverStats, error) {
	var sum serverStats
	for _, n := range c {
		st, err := n.stats(ctx)
		if err != nil {
			return sum, err
		}
		sum = sum.add(st)
	}
	return sum, nil
}

// pingRTT measures the loopback round trip to n: count PINGs one after
// another on a plain TCP connection (no client library), and the same
// through valkey-go. It returns the medians and the plain 99th percentile.
func pingRTT(ctx context.Context, n *node, count int) (plainP50, plainP99, valkeyP50 time.Duration, err error) {
	lat, err := plainPing(ctx, n.addr, count)
	if err != nil {
		return 0, 0, 0, err
	}
	plainP50, plainP99 = lat[len(lat)/2], lat[len(lat)*99/100]
	lat = lat[:0]
	for i := range count + count/10 {
		t0 := time.Now()
		if err := n.admin.Do(ctx, n.admin.B().Ping().Build()).Error(); err != nil {
			return 0, 0, 0, err
		}
		if i >= count/10 {
			lat = append(lat, time.Since(t0))
		}
	}
	slices.Sort(lat)
	return plainP50, plainP99, lat[len(lat)/2], nil
}

// plainPing sends count PINGs one after another on a plain TCP connection
// to addr (after count/10 more to warm up) and returns their round trips,
// sorted.
func plainPing(ctx context.Context, addr string, count int) ([]time.Duration, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	ping := []byte("*1\r\n$4\r\nPING\r\n")
	lat := make([]time.Duration, 0, count)
	for i := range count + count/10 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := c.Write(ping); err != nil {
			return nil, err
		}
		if _, err := r.ReadString('\n'); err != nil {
			return nil, err
		}
		if i >= count/10 { // the first tenth warms up
			lat = append(lat, time.Since(t0))
		}
	}
	slices.Sort(lat)
	return lat, nil
}

// flushSync empties the server and frees the memory before it returns.
func (n *node) flushSync(ctx context.Context) error {
	return n.admin.Do(ctx, n.admin.B().Flushall().Sync().Build()).Error()
}

// usedMemory is INFO memory's used_memory, in bytes.
func (n *node) usedMemory(ctx context.Context) (int64, error) {
	info, err := n.admin.Do(ctx, n.admin.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO memory without used_memory")
}

// dbsize is the number of keys of the server.
func (n *node) dbsize(ctx context.Context) (int64, error) {
	return n.admin.Do(ctx, n.admin.B().Dbsize().Build()).AsInt64()
}
