package runner

import "syscall"

// sysProcAttr puts the command in a process group of its own when group is
// set, so that signals reach every process of a pipeline, and kills it if
// dlock dies (its lease then ends without anyone stopping the command).
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL}
}
