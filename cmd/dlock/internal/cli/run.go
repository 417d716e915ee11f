package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"
	"unicode/utf8"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	"github.com/dlock-dev/dlock/store"
)

var runCmd = &command{
	name:     "run",
	synopsis: "[flags] NAME [--] COMMAND [ARGS...]",
	summary:  "run a command while holding a lock (a distributed flock)",
	argNames: []string{"NAME"},
	minpos:   1,
	tail:     true,
	help: `
Run COMMAND while holding the exclusive lock NAME on a shared store.

dlock takes the lock (at once, or waiting up to --wait), then starts COMMAND
with its own environment plus DLOCK_NAME, DLOCK_FENCE (the fencing token: pass
it to the resource you protect and have it reject lower ones) and DLOCK_TOKEN.
Standard input, output and error are passed through. The lease is renewed at
about a third of --ttl while COMMAND runs and released when it exits. With
--max-hold the lease is renewed up to that long only: a COMMAND that still runs
then is stopped as on a lost lease (exit 70), and the name is freed.

The hold records its owner (--owner, default HOSTNAME/PID) and optional
--data, shown by dlock status and dlock list. With --min-hold the name stays
held at least that long from the grant, even when COMMAND exits sooner: a job
that N hosts start on a schedule runs at most once per --min-hold. The store
keeps the name until then by itself; a COMMAND that runs longer releases it
when it exits, as usual.

If the lease is lost (renewal refused, or the store unreachable until the
lease ran out) COMMAND gets SIGTERM and, after --grace, SIGKILL; dlock then
exits 70. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock
are forwarded to COMMAND. When standard input is not a terminal, COMMAND runs
in a process group of its own and signals go to the whole group; on a
terminal it stays in the foreground group, where Ctrl-C reaches it directly.
If dlock itself is killed, COMMAND is killed too (Linux).

Exit status: COMMAND's own, or 128+N if it was killed by signal N; else
  64  usage error or no shared store configured
  69  store unavailable
  70  lease lost, or --max-hold reached, while COMMAND ran (COMMAND was stopped)
  75  lock held by someone else (after --wait, if given; see --conflict-exit-code)
  126 COMMAND could not be executed; 127 COMMAND not found

Examples:
  dlock run --redis-url redis://127.0.0.1:6379 nightly -- ./report.sh --full
  dlock run --quiet --conflict-exit-code 0 hourly -- ./sync.sh   # cron: skip silently if running
  DLOCK_SERVER=http://locks:3009 dlock run --wait 5m deploy -- make deploy
  dlock run --ttl 10s --grace 30s migrate -- sh -c 'exec ./migrate --fence "$DLOCK_FENCE"'
  dlock run --max-hold 2h nightly -- ./report.sh   # a hung report frees the lock after 2h
  dlock run --min-hold 55s --conflict-exit-code 0 minutely -- ./job.sh   # cron on every host: once a minute`,
}

type runFlags struct {
	ttl, wait, grace time.Duration
	maxHold, minHold time.Duration
	owner, data      string
	verbose, quiet   bool
	conflictCode     int
}

func init() {
	runCmd.flags = func(x *cmd) any {
		f := &runFlags{}
		x.fs.Duration(&f.ttl, "ttl", "DLOCK_TTL", 30*time.Second, "lease length; renewed at about TTL/3 (100ms to 24h)")
		x.fs.Duration(&f.wait, "wait", "DLOCK_WAIT", 0, "how long to wait for a held lock; 0 gives up at once")
		x.fs.Duration(&f.grace, "grace", "DLOCK_GRACE", 10*time.Second, "after losing the lease, time between SIGTERM and SIGKILL")
		x.fs.Duration(&f.maxHold, "max-hold", "DLOCK_MAX_HOLD", 0, "hold the lock at most this long (100ms to 8760h), then stop COMMAND as on a lost lease; 0: no limit")
		x.fs.Duration(&f.minHold, "min-hold", "DLOCK_MIN_HOLD", 0, "keep the name held at least this long from the grant, even if COMMAND exits sooner (at most --max-hold); 0: none")
		x.fs.String(&f.owner, "owner", "OWNER", "DLOCK_OWNER", "", "the owner the hold records, shown by status and list (1-256 bytes; default HOSTNAME/PID)")
		x.fs.String(&f.data, "data", "DATA", "DLOCK_DATA", "", "data recorded with the hold and shown with its owner (at most 1024 bytes)")
		x.fs.Int(&f.conflictCode, "conflict-exit-code", "N", "DLOCK_CONFLICT_EXIT_CODE", runner.ExitLocked,
			"exit code when the lock is held by someone else (0-255); 0 makes a skipped run a success")
		x.fs.Bool(&f.quiet, "quiet", "DLOCK_QUIET", "print nothing when the lock is held by someone else")
		x.fs.Bool(&f.verbose, "verbose", "DLOCK_VERBOSE", "log acquire and release on stderr")
		x.store.register(x.fs, true)
		return f
	}
	runCmd.run = runRun
}

func runRun(ctx context.Context, x *cmd, pos, tail []string) int {
	f := x.opts.(*runFlags)
	name := pos[0]
	if err := dlock.ValidName(name); err != nil {
		return x.usageFail("%v", err)
	}
	if f.ttl < dlock.MinTTL || f.ttl > dlock.MaxTTL {
		return x.usageFail("--ttl must be between 100ms and 24h")
	}
	if f.wait < 0 || f.grace < 0 {
		return x.usageFail("--wait and --grace must not be negative")
	}
	if f.maxHold != 0 && (f.maxHold < dlock.MinTTL || f.maxHold > dlock.MaxHold) {
		return x.usageFail("--max-hold must be 0 or between 100ms and 8760h")
	}
	if f.conflictCode < 0 || f.conflictCode > 255 {
		return x.usageFail("--conflict-exit-code must be between 0 and 255")
	}
	if msg := checkRecord(f); msg != "" {
		return x.usageFail("%s", msg)
	}
	code, err := runUnderLease(ctx, x, f.verbose, runner.Config{
		Name: name, TTL: f.ttl, MaxHold: f.maxHold, Wait: f.wait, Grace: f.grace, Command: tail,
		Holder: f.owner, Data: f.data, MinHold: f.minHold,
	})
	if err != nil && code == runner.ExitLocked { // dlock's outcome, not the command's
		code = f.conflictCode
		if f.quiet {
			return code
		}
	}
	if err != nil {
		fmt.Fprintln(x.env.Stderr, errorLine(err))
	}
	return code
}

// checkRecord checks what the hold of dlock run records (--owner, --data,
// --min-hold) and fills in the default owner; it returns the usage error,
// or "".
func checkRecord(f *runFlags) string {
	switch {
	case f.minHold < 0 || f.minHold > dlock.MaxHold:
		return "--min-hold must be between 0 and 8760h"
	case f.maxHold > 0 && f.minHold > f.maxHold:
		return "--min-hold must not exceed --max-hold"
	case len(f.owner) > store.MaxHolderLen || !utf8.ValidString(f.owner):
		return "--owner must be at most 256 bytes of UTF-8"
	case len(f.data) > store.MaxDataLen:
		return "--data must be at most 1024 bytes"
	}
	if f.owner == "" {
		f.owner = dlock.DefaultHolder()
	}
	return ""
}

// runUnderLease runs cfg.Command under a lease (a leadership with
// cfg.Elect) on the store the flags name, as dlock run and dlock elect do.
// Signals are caught from the start: one that arrives while the lock is
// being acquired cancels the acquisition. It returns the exit code and the
// error to report; a store that cannot be opened was reported already.
func runUnderLease(ctx context.Context, x *cmd, verbose bool, cfg runner.Config) (int, error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, runner.ForwardedSignals...)
	defer signal.Stop(sigs)

	b, code := x.openClient(ctx)
	if b == nil {
		return code, nil
	}
	defer func() {
		// Closing may wait (a ZooKeeper store keeps a min hold's session
		// until it runs out): a signal then takes its default action, as
		// a kill would, rather than being caught for a command that ended.
		signal.Stop(sigs)
		b.close()
	}()
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	log := x.logger(level)
	// No store call outlives a lease: a store that stops answering delays
	// dlock's exit (releasing a lost lease) by at most that long.
	opTimeout := min(max(cfg.TTL, time.Second), 5*time.Second)
	locker, err := dlock.New(b.store, dlock.WithLogger(log), dlock.WithOpTimeout(opTimeout))
	if err != nil {
		return x.fail(err), nil
	}
	defer locker.Close()
	cfg.Locker, cfg.Signals, cfg.Logger = locker, sigs, log
	cfg.Stdin, cfg.Stdout, cfg.Stderr, cfg.Env = x.env.Stdin, x.env.Stdout, x.env.Stderr, x.env.Environ()
	return runner.Run(ctx, cfg)
}
