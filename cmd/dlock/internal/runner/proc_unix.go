//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package runner

import (
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ForwardedSignals are the signals `dlock run` passes on to the command.
var ForwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// isForegroundTTY reports whether r is a terminal whose foreground process
// group is dlock's. The command then stays in dlock's group so that it can
// read the terminal, and the terminal's own signals reach it directly.
func isForegroundTTY(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	pgrp, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP) // ENOTTY when not a terminal
	return err == nil && pgrp == unix.Getpgrp()
}

// fromTerminal reports whether s is a signal a terminal sends to its whole
// foreground process group.
func fromTerminal(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGQUIT
}

type proc struct {
	pid   int
	group bool
}

func (p proc) signal(s os.Signal) {
	n, ok := s.(syscall.Signal)
	if !ok {
		return
	}
	if p.group {
		syscall.Kill(-p.pid, n)
		return
	}
	syscall.Kill(p.pid, n)
}

// reapGroup waits until the command's process group is empty or deadline
// passes, then kills what is left.
func (p proc) reapGroup(deadline time.Time) {
	for syscall.Kill(-p.pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(-p.pid, syscall.SIGKILL)
}
