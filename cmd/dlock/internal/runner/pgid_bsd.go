//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package runner

import "syscall"

// sysProcAttr puts the command in a process group of its own when group is
// set, so that signals reach every process of a pipeline. (These systems
// have no parent-death signal: if dlock is killed, the command runs on.)
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}
