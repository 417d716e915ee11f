package testredis

import (
	"crypto/sha256"
	_ "embed" // the clock shim's source
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/dlock-dev/dlock/internal/testproc"
)

// clockShimSource is an LD_PRELOAD library that adds an offset, read from a
// file at every call, to the server's wall clock (see the file's comment).
// libfaketime cannot start Debian's redis-server.
//
//go:embed clockshim/clockshim.c
var clockShimSource []byte

// clockShimEnv names the offset file for the shim.
const clockShimEnv = "DLOCK_CLOCKSHIM_FILE"

// WithClockShim starts the server with a shim preloaded (LD_PRELOAD) that
// moves its wall clock: gettimeofday, time and clock_gettime of
// CLOCK_REALTIME and CLOCK_REALTIME_COARSE, which Redis reads for TIME and
// for key expiry. The monotonic clocks are left alone, as a real clock step
// leaves them. [Server.StepClock] steps it at once, without a restart; the
// offset persists across [Server.Restart].
//
// The shim is built with gcc, once per test binary (into a directory of
// os.TempDir named by its source's hash, so later runs reuse it). Start
// skips the test when gcc is missing or the system is not Linux, or fails
// it when CI is true.
func WithClockShim() Option {
	return func(o *options) { o.clockShim = true }
}

// clock is a server's offset file, mapped into the test binary.
type clock struct {
	so   string // the shim library
	file string // the offset file: an int64 of microseconds, native byte order
	mu   sync.Mutex
	mem  []byte // the mapping, nil once unmapped
}

// StepClock steps the server's wall clock by d (negative: back), on top of
// the steps before: the server's next read of its clock, for TIME or key
// expiry, sees it. Keys expire by the wall clock, so a step forward expires
// keys early and a step back keeps them longer. It panics unless the server
// was started [WithClockShim].
func (s *Server) StepClock(d time.Duration) {
	c := s.mustClock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		panic("testredis: StepClock after the test ended")
	}
	atomic.AddInt64(c.offset(), d.Microseconds())
}

// ClockOffset returns the sum of the steps of [Server.StepClock]: how far the
// server's wall clock is ahead of the real one (negative: behind). It panics
// unless the server was started [WithClockShim].
func (s *Server) ClockOffset() time.Duration {
	c := s.mustClock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		panic("testredis: ClockOffset after the test ended")
	}
	return time.Duration(atomic.LoadInt64(c.offset())) * time.Microsecond
}

func (s *Server) mustClock() *clock {
	if s.clock == nil {
		panic("testredis: the server was not started WithClockShim")
	}
	return s.clock
}

func (c *clock) offset() *int64 { return (*int64)(unsafe.Pointer(&c.mem[0])) }

func (c *clock) unmap() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem != nil {
		syscall.Munmap(c.mem)
		c.mem = nil
	}
}

// env returns the environment of a server process that runs the shim.
func (c *clock) env() []string {
	preload := c.so
	if prev := os.Getenv("LD_PRELOAD"); prev != "" {
		preload += ":" + prev
	}
	return []string{"LD_PRELOAD=" + preload, clockShimEnv + "=" + c.file}
}

// newClock builds the shim if needed and creates and maps the offset file,
// at offset 0, in dir. It skips tb (fails it under CI=true) when the shim
// cannot be built here for want of Linux or gcc.
func newClock(tb testing.TB, dir string) *clock {
	tb.Helper()
	so := requireClockShim(tb)
	file := filepath.Join(dir, "clockshim.offset")
	if err := os.WriteFile(file, make([]byte, 8), 0o600); err != nil {
		tb.Fatalf("testredis: clock shim: %v", err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		tb.Fatalf("testredis: clock shim: %v", err)
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		tb.Fatalf("testredis: clock shim: mmap %s: %v", file, err)
	}
	c := &clock{so: so, file: file, mem: mem}
	tb.Cleanup(c.unmap)
	return c
}

var shim struct {
	once sync.Once
	path string
	skip string // why the shim cannot be built here, or ""
	err  error
}

// requireClockShim returns the path of the built shim, building it once
// per test binary.
func requireClockShim(tb testing.TB) string {
	tb.Helper()
	shim.once.Do(func() { shim.path, shim.skip, shim.err = buildClockShim() })
	if shim.skip != "" {
		if testproc.InCI() {
			tb.Fatalf("testredis: clock shim: %s (CI=true: a failure, not a skip)", shim.skip)
		}
		tb.Skipf("testredis: clock shim: %s (skipping; with CI=true this would fail)", shim.skip)
	}
	if shim.err != nil {
		tb.Fatalf("testredis: clock shim: %v", shim.err)
	}
	return shim.path
}

// buildClockShim compiles the shim into clockshim.so of a directory named
// by the source's hash and the user, reusing the directory of an earlier
// run when this user owns it alone (else a fresh one). The library is
// written to a temporary name and renamed, so a concurrent test binary or a
// running server never sees a partial file.
func buildClockShim() (path, skip string, err error) {
	if runtime.GOOS != "linux" {
		return "", "LD_PRELOAD needs Linux", nil
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", "gcc not found in PATH; install it with `apt-get install -y gcc`", nil
	}
	sum := sha256.Sum256(clockShimSource)
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("dlock-clockshim-%d-%s", os.Getuid(), hex.EncodeToString(sum[:8])))
	if !ownDir(dir) {
		if dir, err = os.MkdirTemp("", "dlock-clockshim-"); err != nil {
			return "", "", err
		}
	}
	src := filepath.Join(dir, "clockshim.c")
	if err := os.WriteFile(src, clockShimSource, 0o600); err != nil {
		return "", "", err
	}
	tmp, err := os.CreateTemp(dir, "clockshim-*.so")
	if err != nil {
		return "", "", err
	}
	tmp.Close()
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-Wall", "-o", tmp.Name(), src).CombinedOutput()
	if err != nil {
		os.Remove(tmp.Name())
		return "", "", fmt.Errorf("gcc: %v\n%s", err, out)
	}
	path = filepath.Join(dir, "clockshim.so")
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", "", err
	}
	return path, "", nil
}

// ownDir creates dir (mode 0700) if missing and reports whether it is a
// directory that this user owns and no one else may write.
func ownDir(dir string) bool {
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return false
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
