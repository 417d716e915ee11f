package testredis

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/internal/testproc"
)

// WithCallgrind runs the server under valgrind's callgrind, which counts the
// instructions it executes: [Server.Instructions] reads them. The count is
// the same from run to run whatever else the machine is doing, where CPU
// time on a shared machine is not, so benchmarks of the server's cost per
// operation (store/valkey's BenchmarkServerInstructions) compare scripts by
// it. The server runs some 50 times slower. Start skips the test when
// valgrind is not installed (Debian's valgrind; fails it under CI=true).
func WithCallgrind() Option {
	return func(o *options) { o.callgrind = true }
}

// requireCallgrind returns valgrind's path, or skips tb (fails it under
// CI=true), as for a missing redis-server.
func requireCallgrind(tb testing.TB) string {
	tb.Helper()
	p, err := testproc.LookPath("valgrind", "/usr/bin")
	if err == nil {
		_, err = testproc.LookPath("callgrind_control", "/usr/bin")
	}
	if err != nil {
		testproc.Missing(tb, fmt.Errorf("testredis: WithCallgrind: %w", err), "apt-get install -y valgrind")
	}
	return p
}

// callgrindArgv is argv run under valgrind's callgrind, its profiles written
// to s's directory.
func (s *Server) callgrindArgv(argv []string) []string {
	return append([]string{s.valgrind, "--tool=callgrind", "--callgrind-out-file=" + filepath.Join(s.dir, "callgrind.out.%p")}, argv...)
}

// Instructions returns the instructions the server executed since the last
// call, or since it started: callgrind writes a profile of them and starts
// counting anew. The server must have been started WithCallgrind.
func (s *Server) Instructions() (uint64, error) {
	if !s.opts.callgrind {
		return 0, fmt.Errorf("testredis: Instructions: %s not started WithCallgrind", s.Addr())
	}
	pid := strconv.Itoa(s.PID())
	before, _ := filepath.Glob(filepath.Join(s.dir, "callgrind.out."+pid+".*"))
	if out, err := exec.Command("callgrind_control", "--dump", pid).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("testredis: callgrind_control --dump %s: %v: %s", pid, err, out)
	}
	after, _ := filepath.Glob(filepath.Join(s.dir, "callgrind.out."+pid+".*"))
	if len(after) != len(before)+1 {
		return 0, fmt.Errorf("testredis: callgrind_control --dump %s: %d profiles, want %d", pid, len(after), len(before)+1)
	}
	seen := make(map[string]bool, len(before))
	for _, p := range before {
		seen[p] = true
	}
	for _, p := range after {
		if !seen[p] {
			return profileTotal(p)
		}
	}
	return 0, fmt.Errorf("testredis: callgrind_control --dump %s: no new profile", pid)
}

// profileTotal returns the instructions counted in callgrind profile path
// (its "totals:" line).
func profileTotal(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "totals:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("testredis: %s: no totals line", path)
}
