package testredis

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sentinelConfName is a Sentinel's config file, in its directory: Sentinel
// rewrites it with what it learns (replicas, other Sentinels, its epoch),
// so a restarted Sentinel resumes as a real one does.
const sentinelConfName = "sentinel.conf"

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) on a free
// port of 127.0.0.1 and returns once it answers PING. It monitors nothing
// until [Server.Monitor]. Like [Start], a t.Cleanup stops it by PID; opts
// are those of Start (only [WithArgs] applies: Sentinel directives as
// command-line arguments).
func StartSentinel(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	return Start(tb, append(opts, func(o *options) { o.sentinelConf = sentinelConfName })...)
}

// sentinelArgv is argv for a Sentinel: its config file first (created
// empty if missing, kept across restarts), then --sentinel.
func (s *Server) sentinelArgv() []string {
	conf := filepath.Join(s.dir, s.opts.sentinelConf)
	if f, err := os.OpenFile(conf, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		f.Close()
	}
	a := []string{
		conf, "--sentinel",
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
	}
	return append(a, s.opts.args...)
}

// Monitor makes the Sentinel s monitor primary under name with quorum
// (SENTINEL MONITOR), then applies settings, pairs of SENTINEL SET
// option and value ("down-after-milliseconds", "1000", ...). It fails tb on
// an error.
func (s *Server) Monitor(tb testing.TB, name string, primary *Server, quorum int, settings ...string) {
	tb.Helper()
	if _, err := s.Do("SENTINEL", "MONITOR", name, "127.0.0.1", strconv.Itoa(primary.Port()), strconv.Itoa(quorum)); err != nil {
		tb.Fatalf("testredis: sentinel %s: SENTINEL MONITOR %s %s: %v", s.Addr(), name, primary.Addr(), err)
	}
	if len(settings)%2 != 0 {
		tb.Fatalf("testredis: Monitor settings %q: want option, value pairs", settings)
	}
	for i := 0; i < len(settings); i += 2 {
		if _, err := s.Do("SENTINEL", "SET", name, settings[i], settings[i+1]); err != nil {
			tb.Fatalf("testredis: sentinel %s: SENTINEL SET %s %s %s: %v", s.Addr(), name, settings[i], settings[i+1], err)
		}
	}
}

// MasterAddr returns the address ("127.0.0.1:port") the Sentinel s gives
// for the primary of name (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Server) MasterAddr(name string) (string, error) {
	v, err := s.DoTimeout(time.Second, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
	if err != nil {
		return "", err
	}
	host, port, ok := strings.Cut(v, "\n")
	if !ok {
		return "", fmt.Errorf("testredis: sentinel %s: no primary known for %q (reply %q)", s.Addr(), name, v)
	}
	return net.JoinHostPort(host, port), nil
}

// WaitSentinels waits, for at most timeout, until every Sentinel of ss
// gives want as the primary of name and knows the others (num-other-
// sentinels) and replicas replicas (num-slaves), none of them down: a
// group ready to fail over. It fails tb, quoting the last answer, when they do not.
func WaitSentinels(tb testing.TB, ss []*Server, name, want string, replicas int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		last = ""
		for _, s := range ss {
			if err := s.sentinelReady(name, want, len(ss)-1, replicas); err != nil {
				last = err.Error()
				break
			}
		}
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testredis: sentinels not ready after %v: %s", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) sentinelReady(name, want string, others, replicas int) error {
	addr, err := s.MasterAddr(name)
	if err != nil {
		return err
	}
	if addr != want {
		return fmt.Errorf("sentinel %s: primary of %s is %s, want %s", s.Addr(), name, addr, want)
	}
	v, err := s.DoTimeout(time.Second, "SENTINEL", "MASTER", name)
	if err != nil {
		return err
	}
	fields := strings.Split(v, "\n")
	got := map[string]string{}
	for i := 0; i+1 < len(fields); i += 2 {
		got[fields[i]] = fields[i+1]
	}
	if got["num-other-sentinels"] != strconv.Itoa(others) || got["num-slaves"] != strconv.Itoa(replicas) {
		return fmt.Errorf("sentinel %s: %s has num-other-sentinels %s (want %d), num-slaves %s (want %d), flags %s",
			s.Addr(), name, got["num-other-sentinels"], others, got["num-slaves"], replicas, got["flags"])
	}
	if got["flags"] != "master" {
		return fmt.Errorf("sentinel %s: %s flags %s", s.Addr(), name, got["flags"])
	}
	// Every replica known and up (a restarted one loses its s_down flag
	// at its first answer): a failover may pick any of them.
	v, err = s.DoTimeout(time.Second, "SENTINEL", "REPLICAS", name)
	if err != nil {
		return err
	}
	fields = strings.Split(v, "\n")
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "flags" && fields[i+1] != "slave" {
			return fmt.Errorf("sentinel %s: a replica of %s has flags %s", s.Addr(), name, fields[i+1])
		}
	}
	return nil
}
