package server

import (
	"encoding/json"
	"os"
	"regexp"
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
		file string
		line *regexp.Regexp // the line that lists the modes
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
