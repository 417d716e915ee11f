//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package runner

import (
	"io"
	"os"
	"syscall"
	"time"
)

// ForwardedSignals are the signals `dlock run` passes on to the command.
var ForwardedSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

func sysProcAttr(group bool) *syscall.SysProcAttr { return nil }

func isForegroundTTY(r io.Reader) bool { return false }

func fromTerminal(s os.Signal) bool { return false }

type proc struct {
	pid   int
	group bool
}

func (p proc) signal(s os.Signal) {
	if pr, err := os.FindProcess(p.pid); err == nil {
		pr.Signal(s)
	}
}

func (p proc) reapGroup(deadline time.Time) {}
