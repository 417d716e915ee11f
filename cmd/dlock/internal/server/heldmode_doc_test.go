package server

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestHeldModesDocumented: every mode the server can name in a 409's
// heldMode (openapi.json's Mode enum, election included) is in the
// TypeScript HeldMode type, the error tables of the Python and JS READMEs
// and the 409 row of docs/http.md, which users' code branches on.
func TestHeldModesDocumented(t *testing.T) {
	var spec struct {
		Components struct {
			Schemas struct {
				Mode struct {
					Enum []string `json:"enum"`
				} `json:"Mode"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPISpec(t), &spec); err != nil {
		t.Fatal(err)
	}
	modes := spec.Components.Schemas.Mode.Enum
	if len(modes) == 0 {
		t.Fatal("openapi.json: no Mode enum")
	}
	const root = "../../../../"
	for _, c := range []struct {
		file  string
		line  *regexp.Regexp // the line that lists the modes
		quote string
	}{
		{"clients/js/index.d.ts", regexp.MustCompile(`(?m)^export type HeldMode = .*$`), "'"},
		{"clients/js/README.md", regexp.MustCompile("(?m)^\\| `LockedError` \\|.*$"), "`"},
		{"clients/python/README.md", regexp.MustCompile("(?m)^\\| `LockedError` \\|.*$"), "`"},
		{"docs/http.md", regexp.MustCompile(`(?m)^\| 409 \|.*$`), "`"},
	} {
		b, err := os.ReadFile(root + c.file)
		if err != nil {
			t.Fatal(err)
		}
		line := c.line.Find(b)
		if line == nil {
			t.Errorf("%s: no line matching %v", c.file, c.line)
			continue
		}
		for _, m := range modes {
			if !strings.Contains(string(line), c.quote+m+c.quote) {
				t.Errorf("%s lacks held mode %s%s%s in %q", c.file, c.quote, m, c.quote, line)
			}
		}
	}
}

func openAPISpec(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDemoRetryAfterDocumented: docs/http.md's demo 409 examples (an
// immediate conflict with a fresh 15 s hold, held for durationMs + 5000 ms)
// show what the server sends: a retryAfterMs just under 20 s and the
// Retry-After that goes with it (whole seconds, rounded up: 20).
func TestDemoRetryAfterDocumented(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`"Resource locked".*"retryAfterMs":(\d+).*Retry-After: (\d+)|Retry-After: (\d+)\n# \{"error":"Resource locked".*"retryAfterMs":(\d+)`)
	found := re.FindAllStringSubmatch(string(b), -1)
	if len(found) == 0 {
		t.Fatal("docs/http.md: no demo 409 example with Retry-After")
	}
	for _, m := range found {
		ms, after := m[1], m[2]
		if ms == "" {
			ms, after = m[4], m[3]
		}
		n, _ := strconv.Atoi(ms)
		s, _ := strconv.Atoi(after)
		if n <= 19000 || n > 20000 || s != (n+999)/1000 {
			t.Errorf("docs/http.md: retryAfterMs %s with Retry-After %s; a fresh 15 s demo hold has just under 20000 ms left and Retry-After rounds up", ms, after)
		}
	}
}
