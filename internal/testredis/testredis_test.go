package testredis

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("Do(PING) = %q, %v, want PONG, nil", got, err)
	}
	if want := "127.0.0.1:" + strconv.Itoa(s.Port()); s.Addr() != want {
		t.Errorf("Addr() = %q, want %q", s.Addr(), want)
	}
	if want := "redis://" + s.Addr(); s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	if s.PID() <= 0 {
		t.Errorf("PID() = %d, want > 0", s.PID())
	}
	for _, tc := range []struct{ param, want string }{
		{"appendonly", "appendonly\nno"},
		{"save", "save\n"},
		{"bind", "bind\n127.0.0.1"},
		{"dir", "dir\n" + s.Dir()},
	} {
		if got, err := s.Do("CONFIG", "GET", tc.param); err != nil || got != tc.want {
			t.Errorf("Do(CONFIG GET %s) = %q, %v, want %q, nil", tc.param, got, err, tc.want)
		}
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--maxmemory-policy", "allkeys-lru", "--save", "900 1"))
	for _, tc := range []struct{ param, want string }{
		{"maxmemory-policy", "maxmemory-policy\nallkeys-lru"},
		{"save", "save\n900 1"},
	} {
		if got, err := s.Do("CONFIG", "GET", tc.param); err != nil || got != tc.want {
			t.Errorf("Do(CONFIG GET %s) = %q, %v, want %q, nil", tc.param, got, err, tc.want)
		}
	}
}

func TestDo(t *testing.T) {
	t.Parallel()
	s := Start(t)
	tests := []struct {
		args    []string
		want    string
		wantErr string // prefix of the error reply
	}{
		{args: []string{"SET", "k", "v\r\nwith newline"}, want: "OK"},
		{args: []string{"GET", "k"}, want: "v\r\nwith newline"},
		{args: []string{"GET", "missing"}, want: ""},
		{args: []string{"INCR", "n"}, want: "1"},
		{args: []string{"RPUSH", "l", "a", "b", ""}, want: "3"},
		{args: []string{"LRANGE", "l", "0", "-1"}, want: "a\nb\n"},
		{args: []string{"EVAL", "return {1, 'x', {2}}", "0"}, want: "1\nx\n2"},
		{args: []string{"EVAL", "return redis.error_reply('NOPE here')", "0"}, wantErr: "NOPE here"},
		{args: []string{"NOSUCHCOMMAND"}, wantErr: "ERR unknown command"},
		{args: []string{"EVALSHA", strings.Repeat("0", 40), "0"}, wantErr: "NOSCRIPT"},
	}
	for _, tc := range tests {
		got, err := s.Do(tc.args...)
		if tc.wantErr != "" {
			var re ReplyError
			if !errors.As(err, &re) || !strings.HasPrefix(string(re), tc.wantErr) {
				t.Errorf("Do(%q) = %q, %v, want ReplyError %q...", tc.args, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Do(%q) = %q, %v, want %q, nil", tc.args, got, err, tc.want)
		}
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Pause()
	if got, err := s.DoTimeout(200*time.Millisecond, "PING"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("paused: DoTimeout(PING) = %q, %v, want os.ErrDeadlineExceeded", got, err)
	}
	s.Resume()
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Errorf("resumed: Do(PING) = %q, %v, want PONG, nil", got, err)
	}
}

func TestKillStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stop func(*Server)
	}{
		{"Kill", (*Server).Kill},
		{"Stop", (*Server).Stop},
		{"StopPaused", func(s *Server) { s.Pause(); s.Stop() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := Start(t)
			pid := s.PID()
			tc.stop(s)
			tc.stop(s) // a second call does nothing
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("after %s: kill(%d, 0) = %v, want ESRCH", tc.name, pid, err)
			}
			if got, err := s.DoTimeout(time.Second, "PING"); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("after %s: Do(PING) = %q, %v, want ECONNREFUSED", tc.name, got, err)
			}
			s.Restart(t)
			if got, err := s.Do("PING"); err != nil || got != "PONG" {
				t.Errorf("after %s and Restart: Do(PING) = %q, %v, want PONG, nil", tc.name, got, err)
			}
		})
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"NoPersistence", nil, ""},
		{"WithPersistence", []Option{WithPersistence()}, "v"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := Start(t, tc.opts...)
			port, pid := s.Port(), s.PID()
			if _, err := s.Do("SET", "k", "v"); err != nil {
				t.Fatalf("Do(SET) = %v", err)
			}
			s.Restart(t)
			if s.Port() != port {
				t.Errorf("Port() after Restart = %d, want %d", s.Port(), port)
			}
			if s.PID() == pid {
				t.Errorf("PID() after Restart = %d, the old PID", s.PID())
			}
			if got, err := s.Do("GET", "k"); err != nil || got != tc.want {
				t.Errorf("Do(GET) after Restart = %q, %v, want %q, nil", got, err, tc.want)
			}
		})
	}
}

func TestRestartWhilePaused(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Pause()
	s.Restart(t)
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Errorf("Do(PING) = %q, %v, want PONG, nil", got, err)
	}
}

func TestCleanupKills(t *testing.T) {
	t.Parallel()
	var pid int
	t.Run("inner", func(t *testing.T) {
		pid = Start(t).PID()
	})
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("after the test ended: kill(%d, 0) = %v, want ESRCH", pid, err)
	}
}

func TestStartReplica(t *testing.T) {
	t.Parallel()
	p := Start(t)
	r := StartReplica(t, p)
	if _, err := p.Do("SET", "k", "v"); err != nil {
		t.Fatalf("primary: Do(SET) = %v", err)
	}
	if got, err := p.Do("WAIT", "1", "5000"); err != nil || got != "1" {
		t.Fatalf("primary: Do(WAIT 1) = %q, %v, want 1, nil", got, err)
	}
	if got, err := r.Do("GET", "k"); err != nil || got != "v" {
		t.Errorf("replica: Do(GET) = %q, %v, want v, nil", got, err)
	}
	if _, err := r.Do("SET", "k", "w"); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Errorf("replica: Do(SET) = %v, want READONLY error", err)
	}
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 3)
	t.Logf("3-master cluster ready in %v", time.Since(start))
	if got := len(c.Addrs()); got != 3 {
		t.Fatalf("len(Addrs()) = %d, want 3", got)
	}
	for _, n := range c.Nodes() {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil || infoField(info, "cluster_state") != "ok" {
			t.Errorf("node %s: CLUSTER INFO = %q, %v, want cluster_state:ok", n.Addr(), info, err)
		}
	}
	// Exactly one node takes a key; the others redirect to a cluster member.
	for _, key := range []string{"a", "b", "{lock:x}", "lock:y"} {
		owners := 0
		for _, n := range c.Nodes() {
			_, err := n.Do("SET", key, "v")
			if err == nil {
				owners++
				continue
			}
			var re ReplyError
			if !errors.As(err, &re) {
				t.Errorf("node %s: SET %s = %v, want OK or MOVED", n.Addr(), key, err)
				continue
			}
			f := strings.Fields(string(re))
			if len(f) != 3 || f[0] != "MOVED" || !slices.Contains(c.Addrs(), f[2]) {
				t.Errorf("node %s: SET %s = %v, want MOVED to one of %v", n.Addr(), key, err, c.Addrs())
			}
		}
		if owners != 1 {
			t.Errorf("SET %s accepted by %d nodes, want 1", key, owners)
		}
	}
}

func TestClusterNodeRestart(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	n := c.Nodes()[1]
	n.Restart(t)
	start := time.Now()
	c.Wait(t)
	t.Logf("cluster ok again %v after node %s restarted", time.Since(start), n.Addr())
}
