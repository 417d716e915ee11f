package testredis

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr has the kernel kill the server when the test binary dies, even
// on a -timeout panic that skips t.Cleanup. (Pdeathsig fires when the thread
// that started the process exits; the Go runtime only ends a thread when a
// goroutine exits while locked to it, which Start never does.)
func sysProcAttr() *syscall.SysProcAttr {
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
