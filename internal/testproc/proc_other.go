//go:build !linux

package testproc

import (
	"syscall"
	"time"
)

// SysProcAttr is a new process's attributes (Linux has the kernel kill it
// when the test binary dies).
func SysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// waitState gives the signal a moment to land; only Linux can see it has.
func waitState(pid int, stopped bool) { time.Sleep(10 * time.Millisecond) }

func children(pid int) []int { return nil }

func anyAlive(pids []int) bool { return false }
