//go:build unix

package cli

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestSharedStoreNoteNamesEveryStore: the shared-store note of acquire,
// extend and release -h names every store flag that the binary's own error
// for a missing store lists, so that the help does not hide a store that
// works (etcd, PostgreSQL and ZooKeeper were missing from it).
func TestSharedStoreNoteNamesEveryStore(t *testing.T) {
	code, _, stderr := runDlock(t, nil, "acquire", "job")
	if code != 64 || !strings.Contains(stderr, "needs a shared store") {
		t.Fatalf("dlock acquire job without a store = %d, stderr %q, want 64 and the shared-store error", code, stderr)
	}
	_, list, _ := strings.Cut(stderr, "needs a shared store")
	list, _, _ = strings.Cut(list, "(env")
	flags := regexp.MustCompile(`--[a-z-]+`).FindAllString(list, -1)
	if len(flags) < 6 {
		t.Fatalf("the shared-store error names %d store flags (%q), want at least 6", len(flags), flags)
	}
	for _, c := range []string{"acquire", "extend", "release"} {
		code, out, _ := runDlock(t, nil, c, "-h")
		if code != 0 {
			t.Fatalf("dlock %s -h = %d", c, code)
		}
		var note string
		for _, p := range strings.Split(out, "\n\n") {
			if strings.Contains(p, "only make sense on a shared store") {
				note = p
			}
		}
		if note == "" {
			t.Errorf("dlock %s -h has no shared-store note:\n%s", c, out)
			continue
		}
		for _, f := range flags {
			if !strings.Contains(note, f) {
				t.Errorf("dlock %s -h: the shared-store note does not name %s, which works:\n%s", c, f, note)
			}
		}
	}
}

// statusClaims maps what a description of dlock status may promise to the
// fields of `dlock status --json` that keep the promise. "who" (which
// holder) needs a field naming the holder, which status does not have yet.
var statusClaims = []struct {
	claim  *regexp.Regexp
	fields []string // any one of them
}{
	{regexp.MustCompile(`(?i)\bwho\b|\bwhich (holder|client)`), []string{"owner", "holder", "identity"}},
	{regexp.MustCompile(`(?i)\bholders?\b|holder count`), []string{"holders"}},
	{regexp.MustCompile(`(?i)\bmode\b`), []string{"mode"}},
	{regexp.MustCompile(`(?i)time left`), []string{"ttlMs"}},
	{regexp.MustCompile(`(?i)\bfence\b`), []string{"fence"}},
	{regexp.MustCompile(`(?i)\bqueue\b|waiters`), []string{"queue"}},
}

// TestStatusSummarySaysWhatItShows: the one-line description of dlock status
// in `dlock help` and in docs/cli.md's command table promises only what
// `dlock status --json` of a held lock shows, through the real binary and a
// real `dlock serve`.
func TestStatusSummarySaysWhatItShows(t *testing.T) {
	_, help, _ := runDlock(t, nil, "help")
	var summary string
	for _, l := range strings.Split(help, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "status" {
			summary = strings.Join(f[1:], " ")
		}
	}
	docs, err := os.ReadFile("../../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| \\[`dlock status`\\]\\(#dlock-status\\) \\| (.*) \\|$").FindSubmatch(docs)
	if summary == "" || row == nil {
		t.Fatalf("no status line in dlock help (%q) or no status row in docs/cli.md (%v)", summary, row != nil)
	}

	p := startDlock(t, nil, "serve", "--addr", "127.0.0.1:0")
	server := "http://" + serveAddr(t, p)
	name := uniqueName(t)
	if code, out, errOut := runDlock(t, nil, "acquire", "--server", server, "--ttl", "1m", name); code != 0 {
		t.Fatalf("dlock acquire = %d, %q, %q", code, out, errOut)
	}
	code, out, errOut := runDlock(t, nil, "status", "--server", server, "--json", name)
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("dlock status --json = %d, %q, %q (%v)", code, out, errOut, err)
	}
	for _, d := range []struct{ where, text string }{{"dlock help", summary}, {"docs/cli.md", string(row[1])}} {
		for _, c := range statusClaims {
			if !c.claim.MatchString(d.text) {
				continue
			}
			found := false
			for _, f := range c.fields {
				_, ok := st[f]
				found = found || ok
			}
			if !found {
				t.Errorf("%s says status shows %q (%q), but dlock status --json of a held lock has none of %q: %s",
					d.where, c.claim.FindString(d.text), d.text, c.fields, out)
			}
		}
	}
}
