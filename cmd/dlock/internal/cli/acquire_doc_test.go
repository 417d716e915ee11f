package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/internal/testredis"
)

// docScript returns the shell block of docs/cli.md that starts with the
// line start.
func docScript(t *testing.T, start string) string {
	t.Helper()
	b, err := os.ReadFile("../../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```sh\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.HasPrefix(block, start) {
			return block
		}
	}
	t.Fatalf("docs/cli.md has no sh block starting with %q", start)
	return ""
}

// TestAcquireScriptAsDocumented runs docs/cli.md's dlock acquire script as
// written, with sh and the real binary, on a Redis store and on a dlock
// server: only its first line (the server's address) is replaced. The eval
// of acquire's output must reach the commands the script runs: its EXIT
// trap releases with DLOCK_TOKEN, and dlock extend renews with DLOCK_TOKEN
// and DLOCK_TTL_MS from the environment (issue 40 item 4: they were plain
// assignments, and extend exited 64).
func TestAcquireScriptAsDocumented(t *testing.T) {
	const first = "export DLOCK_SERVER=http://locks.internal:3009\n"
	script := docScript(t, first)
	for _, store := range []struct{ name, export string }{
		{"redis", "export DLOCK_REDIS_URL=" + testredis.Start(t).URL()},
		{"server", "export DLOCK_SERVER=" + startServer(t, "")},
	} {
		t.Run(store.name, func(t *testing.T) {
			dir := t.TempDir()
			// The steps record the fence they were given, and that the lease
			// is held while they run.
			for _, step := range []string{"step1.sh", "step2.sh"} {
				body := "#!/bin/sh\necho \"$0 $*\" >> steps.log\ndlock status --json deploy >> steps.log\n"
				if err := os.WriteFile(filepath.Join(dir, step), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			sh := exec.Command("sh", "-c", store.export+"\n"+strings.TrimPrefix(script, first))
			sh.Dir = dir
			sh.Env = baseEnv("PATH=" + filepath.Dir(dlockBin) + string(os.PathListSeparator) + os.Getenv("PATH"))
			out, err := sh.CombinedOutput()
			if err != nil {
				t.Fatalf("the documented script: %v; output:\n%s", err, out)
			}
			if want := "deploy: renewed to 5m0s from now"; !strings.Contains(string(out), want) {
				t.Errorf("the documented script printed %q, want %q (extend to DLOCK_TTL_MS)", out, want)
			}
			if !strings.Contains(string(out), "deploy: released") {
				t.Errorf("the documented script printed %q, want its EXIT trap's release", out)
			}
			log, err := os.ReadFile(filepath.Join(dir, "steps.log"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(log)), "\n")
			if len(lines) != 4 || !strings.HasPrefix(lines[0], "./step1.sh --fence 1") || !strings.HasPrefix(lines[2], "./step2.sh --fence 1") ||
				!strings.Contains(lines[1], `"held":true`) || !strings.Contains(lines[3], `"held":true`) {
				t.Errorf("the steps ran as %q, want step1 and step2 with the fence, each under the lock", lines)
			}
			code, st, _ := runDlock(t, []string{strings.TrimPrefix(store.export, "export ")}, "status", "--json", "deploy")
			if code != 0 || !strings.Contains(st, `"held":false`) {
				t.Errorf("dlock status --json after the script = %d, %q; want free", code, st)
			}
		})
	}
}
