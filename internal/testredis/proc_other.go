//go:build !linux

package testredis

import (
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitState gives the signal a moment to land; only Linux can see it has.
func waitState(pid int, stopped bool) { time.Sleep(10 * time.Millisecond) }
