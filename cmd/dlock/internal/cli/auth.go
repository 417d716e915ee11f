package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/server"
)

var authCmd = &command{
	name:     "auth",
	synopsis: "hash",
	summary:  "print the SHA-256 of a token read from stdin, for a serve --auth-file",
	argNames: []string{"SUBCOMMAND"},
	minpos:   1,
	help: `
'dlock auth hash' reads a token from standard input (its first line, without
the line end; surrounding spaces are trimmed, as the server trims the bearer
token) and prints its SHA-256 in hexadecimal: the "sha256" of an entry of the
auth file of 'dlock serve --auth-file' (see docs/operations.md). The token
itself never goes into the file.

Example:
  TOKEN=$(openssl rand -hex 32)
  printf '%s' "$TOKEN" | dlock auth hash`,
}

func init() {
	authCmd.flags = func(x *cmd) any { return nil }
	authCmd.run = runAuth
}

func runAuth(_ context.Context, x *cmd, pos, _ []string) int {
	if pos[0] != "hash" {
		return x.usageFail("unknown subcommand %q; the only one is hash", pos[0])
	}
	if x.env.Stdin == nil {
		return x.usageFail("no token on standard input")
	}
	line, err := bufio.NewReader(io.LimitReader(x.env.Stdin, 64<<10)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return x.fail(fmt.Errorf("dlock: reading the token: %w", err))
	}
	tok := strings.TrimSpace(line)
	if tok == "" {
		return x.usageFail("no token on standard input")
	}
	fmt.Fprintln(x.env.Stdout, server.HashToken(tok))
	return 0
}
