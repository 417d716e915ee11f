package dlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeFeatures reads README.md's feature table (the table under the
// empty `| | |` header) and returns what it lists as dlock's features: each
// row's heading ("Fencing", "Lease loss"), the names of the Patterns row's
// items ("all-or-nothing multi-locks", "semaphore"), and every exported Go
// identifier in backticks (`Multi`, `Election`, `Done` of `Lease.Done()`).
func readmeFeatures(t *testing.T) (headings, patterns, idents []string) {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n| | |\n| --- | --- |\n")
	if !ok {
		t.Fatal("README.md has no feature table (a table under the header `| | |`)")
	}
	ident := regexp.MustCompile("`(?:[A-Za-z]\\w*\\.)?([A-Z]\\w*)(?:\\(\\))?`")
	for _, row := range strings.Split(table, "\n") {
		if !strings.HasPrefix(row, "| ") {
			break
		}
		cells := strings.Split(strings.Trim(row, "| "), " | ")
		if len(cells) != 2 {
			t.Fatalf("README.md feature table row %q has %d cells, want 2", row, len(cells))
		}
		headings = append(headings, cells[0])
		for _, m := range ident.FindAllStringSubmatch(cells[1], -1) {
			idents = append(idents, m[1])
		}
		if cells[0] != "Patterns" {
			continue
		}
		text, _, _ := strings.Cut(cells[1], " — ")
		for _, item := range splitTopLevel(text) {
			name, _, _ := strings.Cut(item, "(")
			patterns = append(patterns, strings.TrimSpace(name))
		}
	}
	return headings, patterns, idents
}

// splitTopLevel splits s at the commas outside parentheses.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// genericWords are words of feature names too common to name a feature on
// their own ("retry lock" is matched as the whole phrase).
var genericWords = map[string]bool{"lock": true, "mutex": true, "retry": true, "bounded": true, "fenced": true, "one": true, "name": true}

// featureTerms turns the README's features into lower-case terms to look
// for, each mapped to the feature it stands for: every heading and pattern
// name whole, and each word of a pattern name that is hyphenated or not
// generic ("semaphore", "all-or-nothing", "multi-lock"), without a plural s.
// Headings are matched whole only: their words ("lease", "store") are in
// every other sentence.
func featureTerms(headings, patterns []string) map[string]string {
	terms := map[string]string{}
	for _, p := range append(headings, patterns...) {
		terms[singular(strings.ToLower(p))] = p
	}
	for _, p := range patterns {
		for _, w := range strings.Fields(strings.ToLower(p)) {
			if w = singular(w); !genericWords[w] && len(w) > 3 {
				terms[w] = p
			}
		}
	}
	return terms
}

func singular(w string) string {
	if strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
		return w[:len(w)-1]
	}
	return w
}

// denials returns the clauses of docs/migrating.md that say dlock lacks
// something, with their line numbers: in a table whose column is headed
// "dlock…", the reason of a cell "none: …" (up to its first ';' or '.');
// anywhere, "has no …", "there is no …" or "there are no …" (up to the
// clause's end).
func denials(t *testing.T, doc string) (map[int][]string, int) {
	t.Helper()
	noneCells := 0
	out := map[int][]string{}
	clauseEnd := regexp.MustCompile(`[;|]|\. |\.$`)
	cut := func(s string) string {
		if loc := clauseEnd.FindStringIndex(s); loc != nil {
			return s[:loc[0]]
		}
		return s
	}
	lacks := regexp.MustCompile(`(?i)\b(?:has no|have no|there is no|there are no|dlock lacks)\b`)
	var header []string
	for i, line := range strings.Split(doc, "\n") {
		n := i + 1
		for _, loc := range lacks.FindAllStringIndex(line, -1) {
			out[n] = append(out[n], cut(line[loc[0]:]))
		}
		if !strings.HasPrefix(line, "|") {
			header = nil
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if header == nil {
			header = cells
			continue
		}
		for j, c := range cells {
			if j >= len(header) || !strings.HasPrefix(header[j], "dlock") {
				continue
			}
			if rest, ok := strings.CutPrefix(strings.ToLower(c), "none"); ok {
				noneCells++
				out[n] = append(out[n], cut(strings.TrimLeft(rest, ": ")))
			}
		}
	}
	return out, noneCells
}

// TestMigratingDeniesNoListedFeature: docs/migrating.md never answers
// "none" (or "dlock has no …") for a feature that README's feature table
// lists. It said "none: dlock has no all-or-nothing lock over several
// names" for redislock's ObtainMulti and Redisson's getMultiLock, while
// `Multi` and /v1/multi were there.
func TestMigratingDeniesNoListedFeature(t *testing.T) {
	headings, patterns, idents := readmeFeatures(t)
	if len(headings) < 8 || len(patterns) < 8 || len(idents) < 10 {
		t.Fatalf("README feature table gave %d headings, %d patterns and %d identifiers, want at least 8, 8 and 10: has its format changed?",
			len(headings), len(patterns), len(idents))
	}
	terms := featureTerms(headings, patterns)
	listed := map[string]bool{}
	for _, id := range idents {
		listed[id] = true
	}
	b, err := os.ReadFile("docs/migrating.md")
	if err != nil {
		t.Fatal(err)
	}
	found, noneCells := denials(t, string(b))
	if noneCells < 5 {
		t.Fatalf("found %d \"none\" cells in docs/migrating.md's dlock columns, want at least 5: has its format changed?", noneCells)
	}
	code := regexp.MustCompile("`[^`]*`")
	ident := regexp.MustCompile("`(?:[A-Za-z]\\w*\\.)?([A-Z]\\w*)(?:\\(\\))?`")
	word := regexp.MustCompile(`[A-Za-z][A-Za-z-]*`)
	for n, clauses := range found {
		for _, c := range clauses {
			var hits []string
			for _, m := range ident.FindAllStringSubmatch(c, -1) {
				if listed[m[1]] {
					hits = append(hits, "`"+m[1]+"`")
				}
			}
			prose := strings.ToLower(code.ReplaceAllString(c, " "))
			for _, w := range word.FindAllString(prose, -1) {
				if f, ok := terms[singular(w)]; ok {
					hits = append(hits, f)
				}
			}
			for term, f := range terms {
				if strings.Contains(term, " ") && strings.Contains(prose, term) {
					hits = append(hits, f)
				}
			}
			if len(hits) > 0 {
				t.Errorf("docs/migrating.md:%d says dlock lacks %q, but README's feature table lists %q", n, c, hits)
				break // one report per line
			}
		}
	}
}

// TestReadmeOptionsExist: every option the README names (`WithX`) exists
// where the README puts it: unqualified or as dlock.WithX in the root
// package, as pkg.WithX in a package named pkg. The Fencing row called the
// store option valkey.WithFenceRetention a dlock option.
func TestReadmeOptionsExist(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	root, byPkg := options(t)
	re := regexp.MustCompile(`\b(?:([a-z]\w*)\.)?(With[A-Z]\w*)\b`)
	ms := re.FindAllStringSubmatch(string(b), -1)
	if len(ms) == 0 {
		t.Fatal("README.md names no WithX option")
	}
	for _, m := range ms {
		pkg, opt := m[1], m[2]
		switch {
		case pkg == "" || pkg == "dlock":
			if !root[opt] {
				t.Errorf("README.md names %s as a dlock option, but the root package has no func %s (qualify it with its package)", m[0], opt)
			}
		case !byPkg[pkg][opt]:
			t.Errorf("README.md names %s, but no package %s has func %s", m[0], pkg, opt)
		}
	}
}

// options returns the exported package-level With* funcs of the root
// package and of every package of the repository, by package name.
func options(t *testing.T) (root map[string]bool, byPkg map[string]map[string]bool) {
	t.Helper()
	root, byPkg = map[string]bool{}, map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != "." && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "With") {
				continue
			}
			if byPkg[f.Name.Name] == nil {
				byPkg[f.Name.Name] = map[string]bool{}
			}
			byPkg[f.Name.Name][fn.Name.Name] = true
			if filepath.Dir(path) == "." {
				root[fn.Name.Name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, byPkg
}
