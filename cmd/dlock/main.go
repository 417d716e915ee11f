// Command dlock is the dlock lock service and command line: `dlock serve`
// runs the HTTP lock service and dashboard, `dlock run NAME -- CMD` runs a
// command under a distributed lock. Run `dlock help` for the rest, or see
// docs/cli.md.
package main

import (
	"context"
	"os"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.OSEnv()))
}
