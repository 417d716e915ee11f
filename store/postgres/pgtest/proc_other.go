//go:build !linux

package pgtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func children(pid int) []int { return nil }

func anyAlive(pids []int) bool { return false }
