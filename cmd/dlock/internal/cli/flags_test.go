package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
)

func envMap(kv ...string) func(string) string {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

func TestParseRunArgs(t *testing.T) {
	tests := []struct {
		args      []string
		env       []string
		name      string
		tail      []string
		ttl, wait time.Duration
		wantErr   string
	}{
		{args: []string{"job", "--", "echo", "-n", "hi"}, name: "job", tail: []string{"echo", "-n", "hi"}, ttl: 30 * time.Second},
		{args: []string{"job", "echo", "-n"}, name: "job", tail: []string{"echo", "-n"}, ttl: 30 * time.Second},
		{args: []string{"--ttl", "5s", "job", "--wait=1m", "--", "cmd"}, name: "job", tail: []string{"cmd"}, ttl: 5 * time.Second, wait: time.Minute},
		{args: []string{"-ttl", "5s", "job", "cmd", "--ttl", "1s"}, name: "job", tail: []string{"cmd", "--ttl", "1s"}, ttl: 5 * time.Second},
		{args: []string{"--", "--job", "cmd"}, name: "--job", tail: []string{"cmd"}, ttl: 30 * time.Second},
		{args: []string{"job", "--", "--", "x"}, name: "job", tail: []string{"--", "x"}, ttl: 30 * time.Second},
		{args: []string{"job", "cmd"}, env: []string{"DLOCK_TTL=2m", "DLOCK_WAIT=3s"}, name: "job", tail: []string{"cmd"}, ttl: 2 * time.Minute, wait: 3 * time.Second},
		{args: []string{"--ttl", "1m", "job", "cmd"}, env: []string{"DLOCK_TTL=2m"}, name: "job", tail: []string{"cmd"}, ttl: time.Minute},
		{args: []string{"job", "cmd"}, env: []string{"DLOCK_TTL=soon"}, wantErr: "DLOCK_TTL"},
		{args: []string{"--ttl", "soon", "job", "cmd"}, wantErr: "ttl"},
		{args: []string{"--nope", "job", "cmd"}, wantErr: "nope"},
	}
	for _, tt := range tests {
		x := newCmd(runCmd, Env{Getenv: envMap(tt.env...)})
		pos, tail, err := x.fs.parse(tt.args, 1, true)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parse(%q, env %q) error = %v, want one mentioning %s", tt.args, tt.env, err, tt.wantErr)
			}
			continue
		}
		f := x.opts.(*runFlags)
		if err != nil || len(pos) != 1 || pos[0] != tt.name || !slices.Equal(tail, tt.tail) || f.ttl != tt.ttl || f.wait != tt.wait {
			t.Errorf("parse(%q, env %q) = %q, %q, ttl %v, wait %v, %v; want %q, %q, ttl %v, wait %v",
				tt.args, tt.env, pos, tail, f.ttl, f.wait, err, tt.name, tt.tail, tt.ttl, tt.wait)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args    []string
		env     []string
		pos     []string
		token   string
		json    bool
		wantErr string
	}{
		{args: []string{"lock", "--token", "ab"}, pos: []string{"lock"}, token: "ab"},
		{args: []string{"--token", "ab", "lock"}, pos: []string{"lock"}, token: "ab"},
		{args: []string{"lock", "--json"}, pos: []string{"lock"}, json: true},
		{args: []string{"lock"}, env: []string{"DLOCK_JSON=1", "DLOCK_TOKEN=cd"}, pos: []string{"lock"}, json: true, token: "cd"},
		{args: []string{"--json=false", "lock"}, env: []string{"DLOCK_JSON=true"}, pos: []string{"lock"}},
		{args: []string{"lock"}, env: []string{"DLOCK_JSON=maybe"}, wantErr: "DLOCK_JSON"},
		{args: []string{"lock", "other"}, wantErr: `unexpected argument "other"`},
		{args: []string{"lock", "--", "other"}, wantErr: `unexpected argument "other"`},
		{args: []string{}, pos: nil},
		{args: []string{"-h"}, wantErr: flag.ErrHelp.Error()},
	}
	for _, tt := range tests {
		x := newCmd(releaseCmd, Env{Getenv: envMap(tt.env...)})
		pos, _, err := x.fs.parse(tt.args, 1, false)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parse(%q, env %q) error = %v, want %q", tt.args, tt.env, err, tt.wantErr)
			}
			continue
		}
		f := x.opts.(*leaseFlags)
		if err != nil || !slices.Equal(pos, tt.pos) || f.token != tt.token || x.json != tt.json {
			t.Errorf("parse(%q, env %q) = %q, token %q, json %v, %v; want %q, %q, %v",
				tt.args, tt.env, pos, f.token, x.json, err, tt.pos, tt.token, tt.json)
		}
	}
}

// mainResult runs Main in-process.
func mainResult(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), args, Env{Stdout: &stdout, Stderr: &stderr, Getenv: envMap(env...)})
	return code, stdout.String(), stderr.String()
}

func TestMainUsage(t *testing.T) {
	tests := []struct {
		args   []string
		env    []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{args: nil, code: runner.ExitUsage, stderr: "Usage: dlock COMMAND"},
		{args: []string{"bogus"}, code: runner.ExitUsage, stderr: `unknown command "bogus"`},
		{args: []string{"help"}, code: 0, stdout: "Commands:"},
		{args: []string{"--help"}, code: 0, stdout: "Commands:"},
		{args: []string{"help", "run"}, code: 0, stdout: "Usage: dlock run"},
		{args: []string{"help", "bogus"}, code: runner.ExitUsage, stderr: "unknown command"},
		{args: []string{"run", "-h"}, code: 0, stdout: "DLOCK_GRACE"},
		{args: []string{"run"}, code: runner.ExitUsage, stderr: "missing NAME"},
		{args: []string{"run", "job"}, code: runner.ExitUsage, stderr: "missing the command"},
		{args: []string{"run", "job", "--", "true"}, code: runner.ExitUsage, stderr: "shared store"},
		{args: []string{"run", "--ttl", "1ms", "job", "true"}, env: []string{"DLOCK_SERVER=http://127.0.0.1:1"}, code: runner.ExitUsage, stderr: "--ttl"},
		{args: []string{"run", "--conflict-exit-code", "256", "job", "true"}, env: []string{"DLOCK_SERVER=http://127.0.0.1:1"}, code: runner.ExitUsage, stderr: "--conflict-exit-code"},
		{args: []string{"run", "job", "true"}, env: []string{"DLOCK_SERVER=http://127.0.0.1:1", "DLOCK_CONFLICT_EXIT_CODE=zero"}, code: runner.ExitUsage, stderr: "DLOCK_CONFLICT_EXIT_CODE"},
		{args: []string{"run", "--grace", "-1s", "job", "true"}, env: []string{"DLOCK_SERVER=http://127.0.0.1:1"}, code: runner.ExitUsage, stderr: "--grace"},
		{args: []string{"run", "job", "true"}, env: []string{"DLOCK_SERVER=http://a", "DLOCK_REDIS_URL=redis://b"}, code: runner.ExitUsage, stderr: "only one"},
		{args: []string{"run", "job", "true"}, env: []string{"DLOCK_SERVER=ftp://a"}, code: runner.ExitUsage, stderr: "http"},
		{args: []string{"run", "bad\nname", "true"}, env: []string{"DLOCK_SERVER=http://a"}, code: runner.ExitUsage, stderr: "control characters"},
		{args: []string{"acquire", "job"}, code: runner.ExitUsage, stderr: "shared store"},
		{args: []string{"status", "job"}, env: []string{"DLOCK_REDIS_URL=foo://x"}, code: runner.ExitUsage, stderr: "invalid url"},
		{args: []string{"list"}, env: []string{"DLOCK_REDLOCK_URLS=redis://127.0.0.1:1,foo://x,redis://127.0.0.1:1"}, code: runner.ExitUsage, stderr: "node 1"},
		{args: []string{"list", "--server", "http://a", "--key-prefix", "x:"}, code: runner.ExitUsage, stderr: "key-prefix"},
		{args: []string{"list", "--server", "http://a", "--fence-retention", "1h"}, code: runner.ExitUsage, stderr: "fence-retention"},
		{args: []string{"serve", "--fence-retention", "500ms"}, code: runner.ExitUsage, stderr: "fence-retention"},
		{args: []string{"serve", "--postgres-url", "postgres://a", "--fence-retention", "1h"}, code: runner.ExitUsage, stderr: "Valkey/Redis and memory stores only"},
		{args: []string{"status", "job", "--fence-retention", "1ms"}, env: []string{"DLOCK_REDIS_URL=redis://127.0.0.1:1"}, code: runner.ExitUsage, stderr: "fence-retention"},
		{args: []string{"status", "job"}, env: []string{"DLOCK_REDIS_URL=redis://127.0.0.1:1", "DLOCK_FENCE_RETENTION=soon"}, code: runner.ExitUsage, stderr: "DLOCK_FENCE_RETENTION"},
		{args: []string{"acquire", "job", "--token", "xyz"}, env: []string{"DLOCK_SERVER=http://a"}, code: runner.ExitUsage, stderr: "hex"},
		{args: []string{"release", "job"}, env: []string{"DLOCK_SERVER=http://a"}, code: runner.ExitUsage, stderr: "missing --token"},
		{args: []string{"extend", "job", "--token", strings.Repeat("a", 32), "--ttl", "48h"}, env: []string{"DLOCK_SERVER=http://a"}, code: runner.ExitUsage, stderr: "--ttl"},
		{args: []string{"status"}, code: runner.ExitUsage, stderr: "missing NAME"},
		{args: []string{"list", "extra"}, code: runner.ExitUsage, stderr: "unexpected argument"},
		{args: []string{"serve", "--log-level", "loud"}, code: runner.ExitUsage, stderr: "--log-level"},
		{args: []string{"serve", "--max-event-streams", "0"}, code: runner.ExitUsage, stderr: "--max-event-streams"},
		{args: []string{"serve"}, env: []string{"DLOCK_MAX_EVENT_STREAMS=many"}, code: runner.ExitUsage, stderr: "DLOCK_MAX_EVENT_STREAMS"},
		{args: []string{"serve", "--server", "http://a"}, code: runner.ExitUsage, stderr: "not defined"},
		{args: []string{"serve", "--redis-url", "redis://a", "--redlock-urls", "redis://b"}, code: runner.ExitUsage, stderr: "only one"},
		{args: []string{"serve", "--auth-token", "t", "--auth-file", "/nonexistent"}, code: runner.ExitUsage, stderr: "cannot be combined"},
		{args: []string{"serve", "--auth-file", "/nonexistent"}, env: []string{"DLOCK_ADDR=127.0.0.1:0"}, code: 1, stderr: "auth file"},
		{args: []string{"auth"}, code: runner.ExitUsage, stderr: "missing SUBCOMMAND"},
		{args: []string{"auth", "bogus"}, code: runner.ExitUsage, stderr: "unknown subcommand"},
		{args: []string{"auth", "hash"}, code: runner.ExitUsage, stderr: "no token"},
		{args: []string{"version"}, code: 0, stdout: "dlock "},
		{args: []string{"--version"}, code: 0, stdout: "dlock "},
	}
	for _, tt := range tests {
		code, stdout, stderr := mainResult(t, tt.env, tt.args...)
		if code != tt.code || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
			t.Errorf("dlock %q (env %q) = %d\nstdout: %s\nstderr: %s\nwant %d, stdout with %q, stderr with %q",
				tt.args, tt.env, code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	code, out, _ := mainResult(t, nil, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Version == "" || !strings.HasPrefix(v.Go, "go") {
		t.Errorf("dlock version --json = %d, %q (%v)", code, out, err)
	}
}

// TestHelpIsComplete checks that every command has help, that every flag
// names its DLOCK_* env var, and that docs/cli.md mentions every command,
// flag and env var.
func TestHelpIsComplete(t *testing.T) {
	docs, err := os.ReadFile("../../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	flagLine := regexp.MustCompile(`^  --([a-z-]+)`)
	for _, c := range commands() {
		code, out, _ := mainResult(t, nil, c.name, "-h")
		if code != 0 || !strings.HasPrefix(out, "Usage: dlock "+c.name) {
			t.Errorf("dlock %s -h = %d, %q", c.name, code, out)
		}
		if !strings.Contains(string(docs), "dlock "+c.name) {
			t.Errorf("docs/cli.md does not mention dlock %s", c.name)
		}
		x := newCmd(c, Env{Getenv: envMap()})
		for _, d := range x.fs.order {
			if !strings.HasPrefix(d.env, "DLOCK_") {
				t.Errorf("dlock %s --%s has env var %q, want DLOCK_*", c.name, d.name, d.env)
			}
			if !strings.Contains(string(docs), "--"+d.name) || !strings.Contains(string(docs), d.env) {
				t.Errorf("docs/cli.md does not mention --%s or %s", d.name, d.env)
			}
		}
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if flagLine.MatchString(l) {
				n++
				if !strings.Contains(l, "env DLOCK_") {
					t.Errorf("dlock %s -h flag line %q does not name its env var", c.name, l)
				}
			}
		}
		if n != len(x.fs.order) {
			t.Errorf("dlock %s -h lists %d flags, want %d", c.name, n, len(x.fs.order))
		}
	}
	for _, code := range []string{"64", "69", "70", "75", "126", "127"} {
		if !strings.Contains(string(docs), code) {
			t.Errorf("docs/cli.md does not document exit code %s", code)
		}
	}
}

// TestVersionStamped checks that a release build's stamped version (the
// -ldflags -X of .goreleaser.yaml) is the version printed, over the module
// version of the build information.
func TestVersionStamped(t *testing.T) {
	old := stampedVersion
	stampedVersion = "v9.8.7"
	t.Cleanup(func() { stampedVersion = old })
	code, out, _ := mainResult(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "dlock v9.8.7 ") {
		t.Errorf("dlock version with stampedVersion v9.8.7 = %d, %q, want it to start with %q", code, out, "dlock v9.8.7 ")
	}
}
