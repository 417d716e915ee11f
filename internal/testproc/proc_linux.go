package testproc

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// SysProcAttr has the kernel kill the server when the test binary dies, even
// on a -timeout panic that skips t.Cleanup. (Pdeathsig fires when the thread
// that started the process exits; the Go runtime only ends a thread when a
// goroutine exits while locked to it, which Start never does.)
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitState waits, for up to a second, until process pid is stopped (or no
// longer stopped), as /proc/pid/stat reports.
func waitState(pid int, stopped bool) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		// The state follows the command name, which is in parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return
		}
		st := b[i+2]
		if (st == 'T' || st == 't') == stopped {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// children returns the PIDs whose parent is pid.
func children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, p := range stats {
		b, err := os.ReadFile(p) //nolint:gosec // G304: a /proc path built from a PID
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(string(f[1])); ppid == pid {
			c, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out = append(out, c)
		}
	}
	return out
}

// anyAlive reports whether any of pids still exists (zombies count as gone).
func anyAlive(pids []int) bool {
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i >= 0 && i+2 < len(b) && b[i+2] != 'Z' {
			return true
		}
	}
	return false
}
