package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
)

var electCmd = &command{
	name:     "elect",
	synopsis: "[flags] NAME [--] COMMAND [ARGS...]",
	summary:  "run a command only while leading an election (standbys wait)",
	argNames: []string{"NAME"},
	minpos:   1,
	tail:     true,
	help: `
Campaign in the leader election NAME on a shared store and run COMMAND only
while leading. Run the same dlock elect on several hosts: exactly one runs
COMMAND at a time, the others stand by, and when the leader's COMMAND exits
(dlock resigns at once) or the leader dies (its leadership runs out after
--ttl) a standby is elected and starts its COMMAND.

COMMAND gets its own environment plus DLOCK_NAME, DLOCK_TERM (the term: a
number strictly greater than every earlier leader's; pass it to the
resource you protect and have it reject lower ones), DLOCK_FENCE (the same
number) and DLOCK_TOKEN. The leadership is renewed at about a third of --ttl
while COMMAND runs. If it is lost, COMMAND gets SIGTERM and, after --grace,
SIGKILL, as with dlock run; dlock then exits 70. Signals are forwarded as
with dlock run. If dlock itself is killed, COMMAND is killed too (Linux).

A standby waits until it leads (with --wait, at most that long). Elections
need a store that keeps the leader's value, one Valkey/Redis node or cluster
(--redis-url), a Redlock quorum (--redlock-urls), etcd (--etcd-endpoints),
PostgreSQL (--postgres-url) or ZooKeeper (--zookeeper-servers); on a remote
DLOCK_SERVER dlock elect exits 64 (not supported).

Exit status: COMMAND's own, or 128+N if it was killed by signal N; else
  64  usage error, no shared store configured, or elections not supported
  69  store unavailable
  70  leadership lost while COMMAND ran (COMMAND was stopped)
  75  another candidate still led when --wait ran out
  126 COMMAND could not be executed; 127 COMMAND not found

Examples:
  dlock elect --redis-url redis://127.0.0.1:6379 scheduler -- ./scheduler --term-env DLOCK_TERM
  dlock elect --ttl 5s --value "$(hostname)" primary -- sh -c 'exec ./serve --fence "$DLOCK_TERM"'`,
}

type electFlags struct {
	ttl, wait, grace time.Duration
	value            string
	verbose          bool
}

func init() {
	electCmd.flags = func(x *cmd) any {
		f := &electFlags{}
		x.fs.Duration(&f.ttl, "ttl", "DLOCK_TTL", 15*time.Second, "leadership length; renewed at about TTL/3 (100ms to 24h); a dead leader is replaced within it")
		x.fs.Duration(&f.wait, "wait", "DLOCK_WAIT", 0, "how long to stand by; 0 waits until leading")
		x.fs.Duration(&f.grace, "grace", "DLOCK_GRACE", 10*time.Second, "after losing the leadership, time between SIGTERM and SIGKILL")
		x.fs.String(&f.value, "value", "VALUE", "DLOCK_VALUE", "", "the value reported as the leader's (default HOSTNAME:PID)")
		x.fs.Bool(&f.verbose, "verbose", "DLOCK_VERBOSE", "log campaign, election and resignation on stderr")
		x.store.register(x.fs, true)
		return f
	}
	electCmd.run = runElect
}

func runElect(ctx context.Context, x *cmd, pos, tail []string) int {
	f := x.opts.(*electFlags)
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
	if len(f.value) > dlock.MaxValueLen {
		return x.usageFail("--value must be at most %d bytes", dlock.MaxValueLen)
	}
	if f.value == "" {
		host, _ := os.Hostname()
		f.value = host + ":" + strconv.Itoa(os.Getpid())
	}
	code, err := runUnderLease(ctx, x, f.verbose, runner.Config{
		Name: name, TTL: f.ttl, Wait: f.wait, Grace: f.grace, Command: tail,
		Elect: true, Value: f.value, Holder: dlock.DefaultHolder(),
	})
	if err != nil {
		fmt.Fprintln(x.env.Stderr, errorLine(err))
	}
	return code
}
