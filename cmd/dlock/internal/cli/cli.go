// Package cli is the dlock command line: flag and environment parsing,
// store selection and the subcommands. cmd/dlock calls [Main].
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
)

// Env is the process environment a command runs in.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv looks up environment variables (flag defaults).
	Getenv func(string) string
	// Environ is the environment passed on to commands run by `dlock run`.
	Environ func() []string
}

// OSEnv returns the Env of the running process.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Environ: os.Environ}
}

type command struct {
	name     string
	synopsis string           // after "dlock NAME"
	summary  string           // one line for the command list
	help     string           // paragraphs for `dlock help NAME`
	flags    func(x *cmd) any // defines the command's flags; the result is cmd.opts
	run      func(ctx context.Context, c *cmd, pos, tail []string) int
	argNames []string // positional arguments, the first minpos required
	minpos   int
	tail     bool // takes a command after its positionals
}

// cmd is one invocation of a command.
type cmd struct {
	*command
	env   Env
	fs    *flagSet
	store storeFlags
	json  bool
	opts  any // the command's own flag values
}

func commands() []*command {
	return []*command{serveCmd, runCmd, electCmd, statusCmd, listCmd, acquireCmd, extendCmd, releaseCmd, forceReleaseCmd, authCmd, versionCmd}
}

func lookup(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// Main runs the dlock command line with args (without the program name)
// and returns the process exit code: the command's own for `dlock run`,
// else 0 or one of the runner.Exit* codes (docs/cli.md lists them). ctx
// ends `dlock serve` gracefully and bounds the other commands' store calls.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Environ == nil {
		env.Environ = func() []string { return nil }
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if len(args) == 0 {
		mainUsage(env.Stderr)
		return runner.ExitUsage
	}
	switch name := args[0]; name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && name == "help" {
			c := lookup(args[1])
			if c == nil {
				fmt.Fprintf(env.Stderr, "dlock: unknown command %q; see dlock help\n", args[1])
				return runner.ExitUsage
			}
			newCmd(c, env).usage(env.Stdout)
			return 0
		}
		mainUsage(env.Stdout)
		return 0
	case "-v", "-version", "--version":
		args = []string{"version"}
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(env.Stderr, "dlock: unknown command %q; see dlock help\n", args[0])
		return runner.ExitUsage
	}
	x := newCmd(c, env)
	pos, tail, err := x.fs.parse(args[1:], len(c.argNames), c.tail)
	if errors.Is(err, flag.ErrHelp) {
		x.usage(env.Stdout)
		return 0
	}
	if err == nil && len(pos) < c.minpos {
		err = fmt.Errorf("missing %s", c.argNames[len(pos)])
	}
	if err == nil && c.tail && len(tail) == 0 {
		err = errors.New("missing the command to run")
	}
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "dlock:") {
			msg = "dlock " + c.name + ": " + msg
		}
		fmt.Fprintf(env.Stderr, "%s\nUsage: dlock %s %s\nRun 'dlock %s -h' for details.\n", msg, c.name, c.synopsis, c.name)
		return runner.ExitUsage
	}
	return c.run(ctx, x, pos, tail)
}

func newCmd(c *command, env Env) *cmd {
	x := &cmd{command: c, env: env, fs: newFlagSet(c.name, env.Getenv)}
	x.opts = c.flags(x)
	return x
}

func (x *cmd) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: dlock %s %s\n\n%s\n", x.name, x.synopsis, strings.TrimSpace(x.help))
	x.fs.usage(w)
}

// fail reports err on stderr and returns its exit code.
func (x *cmd) fail(err error) int {
	code, err := runner.ExitCode(err)
	fmt.Fprintln(x.env.Stderr, errorLine(err))
	return code
}

// usageFail reports a usage error.
func (x *cmd) usageFail(format string, args ...any) int {
	fmt.Fprintf(x.env.Stderr, "dlock %s: %s\nRun 'dlock %s -h' for details.\n", x.name, fmt.Sprintf(format, args...), x.name)
	return runner.ExitUsage
}

// errorLine formats err for stderr: one line, with the dlock: prefix once.
func errorLine(err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	if !strings.HasPrefix(msg, "dlock:") {
		msg = "dlock: " + msg
	}
	return msg
}

func (x *cmd) logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(x.env.Stderr, &slog.HandlerOptions{Level: level}))
}

func mainUsage(w io.Writer) {
	fmt.Fprint(w, `dlock: distributed locks on Valkey/Redis, as a service and a command line.

Usage: dlock COMMAND [flags] [arguments]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `  help          show help for dlock or a command: dlock help COMMAND, or dlock COMMAND -h

Stores (every command but serve and version needs a shared one):
  --redis-url URL          one Valkey/Redis node or cluster      (env DLOCK_REDIS_URL)
  --redlock-urls URL,...   Redlock quorum over independent nodes (env DLOCK_REDLOCK_URLS)
  --etcd-endpoints H:P,... etcd                                  (env DLOCK_ETCD_ENDPOINTS)
  --postgres-url URL       PostgreSQL                            (env DLOCK_POSTGRES_URL)
  --zookeeper-servers H:P  ZooKeeper                             (env DLOCK_ZOOKEEPER_SERVERS)
  --server URL             a remote dlock serve                  (env DLOCK_SERVER)
                           https://: --ca-file, --cert, --key    (env DLOCK_CA_FILE, DLOCK_CERT, DLOCK_KEY)

Exit codes: the command's own code for run; otherwise 0 success, 1 unexpected
error, 64 usage, 69 store unavailable, 70 lease lost or token not holding the lock,
75 lock held by someone else, 126/127 command not executable/not found,
128+N killed by signal N. See docs/cli.md.

Examples:
  dlock serve                                  # HTTP lock service on :3009, in-memory store
  dlock run --redis-url redis://localhost:6379 nightly-report -- ./report.sh
  lease=$(dlock acquire --server http://locks:3009 --ttl 5m deploy) || exit
  eval "$lease"
  ...; dlock release --server http://locks:3009 --token "$DLOCK_TOKEN" deploy
`)
}
