package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A seam is a published module importing an internal package of another
// published module: store/goredis imports the root's internal/redisproto.
// An internal package promises nothing, so the two are released together,
// and the importer requires the other at exactly the release's version
// (docs/releasing.md, "Modules released together").
type seam struct {
	Dir    string // the importing module's directory
	Import string // the internal package
	Owner  string // the directory of the module that holds it
}

// findSeams lists the seams of the published modules of the tree at root,
// reading the imports of their non-test Go files (a user builds those).
func findSeams(root string) ([]seam, error) {
	var out []seam
	for _, dir := range published {
		imports, err := moduleImports(root, dir)
		if err != nil {
			return nil, err
		}
		for _, imp := range imports {
			owner, ok := ownerOf(imp)
			if !ok || owner == dir || !isInternal(imp) {
				continue
			}
			out = append(out, seam{Dir: dir, Import: imp, Owner: owner})
		}
	}
	return out, nil
}

// checkSeams fails unless every seam's importer requires the module it
// reaches into at exactly version, the release being rehearsed.
func checkSeams(root, version string) ([]seam, error) {
	seams, err := findSeams(root)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, s := range seams {
		f, err := readMod(filepath.Join(root, s.Dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		got := "nothing"
		for _, r := range f.Require {
			if r.Mod.Path == pathOf(s.Owner) {
				got = r.Mod.Version
			}
		}
		if got != version {
			bad = append(bad, fmt.Sprintf("%s imports %s, an internal package of %s, so the two are released together and %s/go.mod must require %s %s exactly (it requires %s)",
				s.Dir, s.Import, pathOf(s.Owner), s.Dir, pathOf(s.Owner), version, got))
		}
	}
	if len(bad) > 0 {
		return seams, fmt.Errorf("modules released together:\n\t%s", strings.Join(bad, "\n\t"))
	}
	return seams, nil
}

// ownerOf is the directory of the published module that holds the package
// imp: the longest published module path that is a prefix of it.
func ownerOf(imp string) (string, bool) {
	best, found := "", false
	for _, dir := range published {
		p := pathOf(dir)
		if (imp == p || strings.HasPrefix(imp, p+"/")) && (!found || len(p) > len(pathOf(best))) {
			best, found = dir, true
		}
	}
	return best, found
}

func isInternal(imp string) bool {
	return strings.HasSuffix(imp, "/internal") || strings.Contains(imp, "/internal/")
}

// moduleImports is the sorted set of import paths of the non-test Go files
// of the module in dir, leaving out nested modules and testdata.
func moduleImports(root, dir string) ([]string, error) {
	base := filepath.Join(root, dir)
	set := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == base {
				return nil
			}
			if d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, is := range f.Imports {
			p, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return err
			}
			set[p] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}
