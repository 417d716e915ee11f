package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
)

var forceReleaseCmd = &command{
	name:     "force-release",
	synopsis: "[flags] NAME",
	summary:  "end every hold of a lock without its token (an operator's way out)",
	argNames: []string{"NAME"},
	minpos:   1,
	help: `
End every hold of lock NAME on a shared store, whatever its mode and token
(a foreign library's key on Valkey/Redis too), even one kept by a minimum
hold, and print the holds it ended: their owners, ages and fences. Queue
places are kept, and so is the fence counter: the next grant's fence is
above every ended hold's, so the forced holders' late writes are refused by
a resource that checks fences. A forced holder is not told: it goes on until
its next renewal is refused (at most its TTL), while the name may already be
granted again.

With --server the service does it (an auth file must give the credential
admin access), logs it and sends it as a "forced" lock event naming who
forced it and who held. Exits 0 whether or not anybody held the lock.

Examples:
  dlock force-release --redis-url redis://127.0.0.1:6379 nightly
  dlock force-release --server http://locks:3009 --json deploy`,
}

func init() {
	forceReleaseCmd.flags = func(x *cmd) any {
		x.fs.Bool(&x.json, "json", "DLOCK_JSON", "print JSON instead of text")
		x.store.register(x.fs, true)
		return nil
	}
	forceReleaseCmd.run = runForceRelease
}

// forcedJSON is what force-release prints with --json.
type forcedJSON struct {
	Name  string      `json:"name"`
	Ended []ownerJSON `json:"ended"`
}

func runForceRelease(ctx context.Context, x *cmd, pos, _ []string) int {
	name := pos[0]
	if err := dlock.ValidName(name); err != nil {
		return x.usageFail("%v", err)
	}
	b, code := x.openClient(ctx)
	if b == nil {
		return code
	}
	defer b.close()
	locker, err := dlock.New(b.store)
	if err != nil {
		return x.fail(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ended, err := locker.ForceRelease(ctx, name)
	if err != nil {
		return x.fail(err)
	}
	out := forcedJSON{Name: name, Ended: owners(ended, time.Now())}
	if x.json {
		return x.printJSON(out)
	}
	if len(out.Ended) == 0 {
		fmt.Fprintf(x.env.Stdout, "%s: nobody held it\n", name)
		return 0
	}
	fmt.Fprintf(x.env.Stdout, "%s: force-released %d hold(s)\n", name, len(out.Ended))
	for _, o := range out.Ended {
		fmt.Fprintln(x.env.Stdout, "  "+describeOwner(o))
	}
	return 0
}
