// Package runner implements `dlock run`: run a command while holding a
// distributed lock, the way flock(1) does with a local file.
//
// Run takes the lock (once, or waiting up to Config.Wait), starts the command
// with DLOCK_NAME, DLOCK_FENCE and DLOCK_TOKEN added to its environment and
// keeps the lease alive with the Locker's auto-renewal while the command
// runs. If the lease is lost, the command gets SIGTERM and, if it is still
// running after Config.Grace, SIGKILL: from the moment of the loss the lock
// must be presumed held by someone else, and only the fence (DLOCK_FENCE)
// checked by the protected resource keeps a slow command harmless. Signals
// received by dlock are forwarded to the command. The lock is released when
// the command exits.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
)

// Exit codes of `dlock run` for its own outcomes. Otherwise it exits with
// the command's code, or 128+N when the command was killed by signal N.
// The numbers follow sysexits(3) and the shell's conventions.
const (
	ExitOK          = 0
	ExitFailure     = 1   // an unexpected error
	ExitUsage       = 64  // EX_USAGE: bad flags or arguments, no store configured
	ExitUnavailable = 69  // EX_UNAVAILABLE: the store could not be reached
	ExitLeaseLost   = 70  // EX_SOFTWARE: the lease was lost while the command ran (or, for release/extend, the token holds nothing)
	ExitLocked      = 75  // EX_TEMPFAIL: the lock is held by someone else (and --wait ran out)
	ExitCannotExec  = 126 // the command was found but could not be started
	ExitNotFound    = 127 // the command was not found
)

// Config is what Run needs.
type Config struct {
	// Locker hands out the lease. Run does not close it.
	Locker *dlock.Locker
	// Name is the lock name.
	Name string
	// TTL is the lease length; the lease is renewed at about TTL/3.
	TTL time.Duration
	// MaxHold, when positive, bounds how long the lease is held
	// (dlock.WithMaxHold): renewal stops there, and the command is stopped
	// as on a lost lease.
	MaxHold time.Duration
	// Holder, Data and MinHold are recorded with the hold
	// (dlock.WithHolder, dlock.WithHolderData, dlock.WithMinHold): who
	// holds it, the caller's data, and how long at least the name stays
	// held from the grant, even after COMMAND exits (not with Elect).
	Holder, Data string
	MinHold      time.Duration
	// Wait is how long to wait for a held lock; 0 fails at once.
	Wait time.Duration
	// Grace is how long the command has to exit after SIGTERM on lease loss
	// before it gets SIGKILL.
	Grace time.Duration
	// Command is the program and its arguments; the program is looked up
	// in PATH.
	Command []string
	// Stdin, Stdout and Stderr are passed to the command. When they are
	// *os.File the command gets the file itself.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Env is the command's environment before DLOCK_NAME, DLOCK_FENCE and
	// DLOCK_TOKEN are set in it (usually os.Environ()).
	Env []string
	// Signals delivers the signals dlock receives; each is forwarded to the
	// command while it runs, and one that arrives while the lock is being
	// acquired makes Run give up with exit code 128+N. Nil: none.
	Signals <-chan os.Signal
	// Logger receives dlock's own messages (never tokens). Nil: discard.
	Logger *slog.Logger
	// Elect makes Run campaign in the election Name with Value (`dlock
	// elect`) instead of taking its mutex: it waits while another
	// candidate leads (Wait 0: without limit), runs the command while
	// leading, with DLOCK_TERM (the term, equal to DLOCK_FENCE) added to
	// its environment, and resigns when the command exits.
	Elect bool
	Value string
}

// Run runs the command under the lock and returns the exit code dlock
// should exit with, and an error describing dlock's own failure (nil when
// the code is the command's). ctx bounds the acquisition only: once the
// command runs, it is stopped only by lease loss or by forwarded signals.
func Run(ctx context.Context, cfg Config) (int, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Command) == 0 {
		return ExitUsage, errors.New("dlock: no command to run")
	}
	if cfg.Locker == nil {
		return ExitUsage, errors.New("dlock: no locker")
	}
	path, err := exec.LookPath(cfg.Command[0])
	if err != nil {
		code := ExitNotFound
		if !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, os.ErrNotExist) {
			code = ExitCannotExec
		}
		return code, fmt.Errorf("dlock: %v", err)
	}

	lease, code, err := acquire(ctx, cfg, log)
	if err != nil {
		return code, err
	}
	if cfg.Elect {
		log.Info("dlock: elected", "name", cfg.Name, "term", lease.Fence())
	} else {
		log.Info("dlock: lock acquired", "name", cfg.Name, "fence", lease.Fence())
	}
	code, err = runChild(cfg, path, lease, log)
	if lease.Err() == nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		rerr := lease.Release(rctx)
		cancel()
		switch {
		case rerr == nil:
			log.Info("dlock: lock released", "name", cfg.Name)
		case errors.Is(rerr, dlock.ErrLeaseLost), errors.Is(rerr, dlock.ErrNotHeld):
			// Lost between the command's exit and the release.
			if err == nil {
				return ExitLeaseLost, fmt.Errorf("dlock: lease on %q lost before release (command exited %d)", cfg.Name, code)
			}
		default:
			log.Warn("dlock: release failed; the lock frees itself when its TTL runs out", "name", cfg.Name, "err", rerr)
		}
	}
	return code, err
}

// acquire takes the lease, giving up on a signal.
func acquire(ctx context.Context, cfg Config, log *slog.Logger) (*dlock.Lease, int, error) {
	opts := []dlock.Option{dlock.WithAutoRenew()}
	if cfg.TTL != 0 {
		opts = append(opts, dlock.WithTTL(cfg.TTL))
	}
	if cfg.MaxHold > 0 {
		opts = append(opts, dlock.WithMaxHold(cfg.MaxHold))
	}
	if cfg.Holder != "" {
		opts = append(opts, dlock.WithHolder(cfg.Holder))
	}
	if cfg.Data != "" {
		opts = append(opts, dlock.WithHolderData(cfg.Data))
	}
	if cfg.MinHold > 0 {
		opts = append(opts, dlock.WithMinHold(cfg.MinHold))
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopped := make(chan struct{})
	watching := make(chan struct{})
	var sig os.Signal
	go func() {
		defer close(watching)
		select {
		case s := <-cfg.Signals:
			sig = s
			cancel(errSignal)
		case <-stopped:
		}
	}()
	var lease *dlock.Lease
	var err error
	switch {
	case cfg.Elect:
		wctx, wcancel := actx, context.CancelFunc(func() {})
		if cfg.Wait > 0 {
			wctx, wcancel = context.WithTimeoutCause(actx, cfg.Wait, errWaitOver)
		}
		log.Info("dlock: campaigning", "name", cfg.Name)
		lease, err = cfg.Locker.Election(cfg.Name, opts...).Campaign(wctx, cfg.Value)
		wcancel()
	default:
		m := cfg.Locker.Mutex(cfg.Name, opts...)
		lease, err = m.TryLock(actx)
		if cfg.Wait > 0 && errors.Is(err, dlock.ErrLocked) {
			log.Info("dlock: lock held by someone else; waiting", "name", cfg.Name, "wait", cfg.Wait)
			wctx, wcancel := context.WithTimeoutCause(actx, cfg.Wait, errWaitOver)
			lease, err = m.Lock(wctx)
			wcancel()
		}
	}
	close(stopped)
	<-watching
	if err == nil {
		return lease, 0, nil
	}
	if sig != nil {
		return nil, 128 + signalNumber(sig), fmt.Errorf("dlock: %v while acquiring %q", sig, cfg.Name)
	}
	code, err := ExitCode(err)
	if code == ExitLocked && cfg.Wait > 0 {
		err = fmt.Errorf("%v; gave up after waiting %v", err, cfg.Wait)
	}
	return nil, code, err
}

var (
	errSignal   = errors.New("dlock: signal received")
	errWaitOver = errors.New("dlock: --wait ran out")
)

// ExitCode maps an error from acquiring or using a lock to dlock's exit
// code, and the error to report.
func ExitCode(err error) (int, error) {
	var le *dlock.LockedError
	switch {
	case err == nil:
		return ExitOK, nil
	case errors.As(err, &le):
		a := "a"
		if le.Held == dlock.ModeElection {
			a = "an"
		}
		msg := fmt.Sprintf("dlock: lock %q is held by someone else (%s %v hold", le.Name, a, le.Held)
		if le.RetryAfter > 0 {
			msg += fmt.Sprintf(", for up to %v more", le.RetryAfter.Round(time.Millisecond))
		}
		msg += ")"
		return ExitLocked, errors.New(msg)
	case errors.Is(err, dlock.ErrLocked):
		return ExitLocked, err
	case errors.Is(err, dlock.ErrLeaseLost), errors.Is(err, dlock.ErrNotHeld):
		return ExitLeaseLost, err
	case errors.Is(err, dlock.ErrInvalid), errors.Is(err, dlock.ErrNotSupported):
		return ExitUsage, err
	case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return ExitUnavailable, err
	}
	return ExitFailure, err
}

// childEnv returns env without DLOCK_NAME, DLOCK_FENCE, DLOCK_TOKEN and
// DLOCK_TERM, then with them set for lease (DLOCK_TERM only when term).
func childEnv(env []string, lease *dlock.Lease, term bool) []string {
	out := make([]string, 0, len(env)+4)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DLOCK_NAME" || k == "DLOCK_FENCE" || k == "DLOCK_TOKEN" || k == "DLOCK_TERM" {
			continue
		}
		out = append(out, kv)
	}
	fence := strconv.FormatInt(lease.Fence(), 10)
	out = append(out, "DLOCK_NAME="+lease.Name(), "DLOCK_FENCE="+fence, "DLOCK_TOKEN="+lease.Token())
	if term {
		out = append(out, "DLOCK_TERM="+fence)
	}
	return out
}

// runChild starts the command and supervises it until it exits.
func runChild(cfg Config, path string, lease *dlock.Lease, log *slog.Logger) (int, error) {
	cmd := &exec.Cmd{
		Path:   path,
		Args:   cfg.Command,
		Env:    childEnv(cfg.Env, lease, cfg.Elect),
		Stdin:  cfg.Stdin,
		Stdout: cfg.Stdout,
		Stderr: cfg.Stderr,
	}
	interactive := isForegroundTTY(cfg.Stdin)
	cmd.SysProcAttr = sysProcAttr(!interactive)
	if err := cmd.Start(); err != nil {
		code := ExitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return code, fmt.Errorf("dlock: %v", err)
	}
	p := proc{pid: cmd.Process.Pid, group: !interactive}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var (
		lost     bool
		leaseEnd = lease.Done()
		grace    <-chan time.Time
		deadline time.Time
		waitErr  error
	)
loop:
	for {
		select {
		case waitErr = <-exited:
			break loop
		case s := <-cfg.Signals:
			if interactive && fromTerminal(s) {
				continue // the terminal sent it to the command too
			}
			p.signal(s)
		case <-leaseEnd:
			leaseEnd = nil
			if lease.Err() == nil {
				continue // released: cannot happen while the command runs
			}
			lost = true
			log.Error("dlock: lease lost; stopping the command", "name", cfg.Name, "fence", lease.Fence(), "err", lease.Err(), "grace", cfg.Grace)
			p.signal(syscall.SIGTERM)
			deadline = time.Now().Add(cfg.Grace)
			t := time.NewTimer(cfg.Grace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			grace = nil
			log.Error("dlock: command still running after the grace period; killing it", "name", cfg.Name)
			p.signal(syscall.SIGKILL)
		}
	}
	if !lost && lease.Err() != nil {
		lost = true
	}
	if lost && p.group {
		// The command's leader exited; processes it left in its group run
		// without the lock. Give them the rest of the grace period.
		p.reapGroup(deadline)
	}
	code := childCode(cmd.ProcessState, waitErr)
	if lost && errors.Is(lease.Err(), dlock.ErrMaxHold) {
		return ExitLeaseLost, fmt.Errorf("dlock: lease on %q reached its max hold of %v; the command was stopped (command exited %d)", cfg.Name, cfg.MaxHold, code)
	}
	if lost {
		return ExitLeaseLost, fmt.Errorf("dlock: lease on %q lost while the command ran (command exited %d)", cfg.Name, code)
	}
	return code, nil
}

// childCode is the shell's view of how the command ended.
func childCode(ps *os.ProcessState, waitErr error) int {
	if ps == nil {
		return ExitFailure
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if c := ps.ExitCode(); c >= 0 {
		return c
	}
	return ExitFailure
}

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
