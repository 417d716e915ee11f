package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

// recipeHeading is the README section that shows a module how to use the
// library before any version is published.
const recipeHeading = "### The library before v0.1.0"

// preReleaseRecipe is that section's recipe: the replace lines of the
// go.mod block and the modules of its `go get` line.
type preReleaseRecipe struct {
	Replace []*modfile.Replace
	Get     []module.Version
}

// readRecipe reads the pre-release recipe from README.md: in the section
// recipeHeading, the fenced block holding "replace (" and the line starting
// "go get ".
func readRecipe(readme string) (*preReleaseRecipe, error) {
	_, section, ok := strings.Cut(readme, "\n"+recipeHeading+"\n")
	if !ok {
		return nil, fmt.Errorf("README.md has no section %q", recipeHeading)
	}
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	r := &preReleaseRecipe{}
	blocks := strings.Split(section, "```")
	for i := 1; i < len(blocks); i += 2 { // the insides of the fences
		body := blocks[i][strings.Index(blocks[i], "\n")+1:]
		if strings.Contains(body, "replace (") {
			f, err := modfile.Parse("README.md", []byte("module example.com/m\n\n"+body), nil)
			if err != nil {
				return nil, fmt.Errorf("README.md %s: the go.mod block: %v", recipeHeading, err)
			}
			r.Replace = f.Replace
		}
		for line := range strings.SplitSeq(body, "\n") {
			args, ok := strings.CutPrefix(strings.TrimSpace(line), "go get ")
			if !ok {
				continue
			}
			args, _, _ = strings.Cut(args, "#")
			for _, a := range strings.Fields(args) {
				path, version, ok := strings.Cut(a, "@")
				if !ok {
					return nil, fmt.Errorf("README.md %s: go get %s has no @version", recipeHeading, a)
				}
				r.Get = append(r.Get, module.Version{Path: path, Version: version})
			}
		}
	}
	if len(r.Replace) == 0 || len(r.Get) == 0 {
		return nil, fmt.Errorf("README.md %s: want a go.mod block with a replace block and a go get line (found %d replace lines, %d modules to get)",
			recipeHeading, len(r.Replace), len(r.Get))
	}
	return r, nil
}

// check reports what the recipe misses: a replace line for every published
// module but cmd/dlock (a binary, not a library), each pointing at its
// directory of a checkout at ../dlock, and a go get of the root.
func (r *preReleaseRecipe) check() error {
	var errs []error
	got := map[string]string{}
	for _, rep := range r.Replace {
		got[rep.Old.Path] = rep.New.Path
		if rep.Old.Version != "" || rep.New.Version != "" {
			errs = append(errs, fmt.Errorf("replace %s %s => %s %s: want a directory for every version", rep.Old.Path, rep.Old.Version, rep.New.Path, rep.New.Version))
		}
	}
	for _, dir := range published {
		if dir == "cmd/dlock" {
			continue
		}
		want := filepath.ToSlash(filepath.Join("../dlock", dir))
		if got[pathOf(dir)] != want {
			errs = append(errs, fmt.Errorf("no replace %s => %s (got %q)", pathOf(dir), want, got[pathOf(dir)]))
		}
	}
	if !slices.ContainsFunc(r.Get, func(m module.Version) bool { return m.Path == modulePath }) {
		errs = append(errs, fmt.Errorf("the go get line does not get %s", modulePath))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("README.md %s: %w", recipeHeading, err)
	}
	return nil
}

// rehearsePreRelease builds a module by README's pre-release recipe, as a
// user does before any version is published: a checkout at ../dlock (here
// the working tree), the README's replace block in go.mod, its `go get`
// line, then a build and a run of a program that imports every module the
// go get line names. It is skipped once README.md has no such section
// (after the first release). The proxy holds third-party modules only (the module
// cache's download directory) and the module cache starts empty, so every
// dlock module can only come from the checkout.
func rehearsePreRelease(root, tmp, cache string, env []string, log io.Writer, r *rehearsal) error {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "\n"+recipeHeading+"\n") {
		fmt.Fprintf(log, "pre-release recipe: README.md has no section %q (a version is published): skipped\n", recipeHeading)
		return nil
	}
	recipe, err := readRecipe(string(b))
	if err != nil {
		return err
	}
	if err := recipe.check(); err != nil {
		return err
	}
	base := filepath.Join(tmp, "prerelease")
	dir := filepath.Join(base, "app")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Symlink(root, filepath.Join(base, "dlock")); err != nil {
		return err
	}
	f, err := modfile.Parse("go.mod", []byte("module example.com/app\n\ngo 1.26.0\n"), nil)
	if err != nil {
		return err
	}
	for _, rep := range recipe.Replace {
		if err := f.AddReplace(rep.Old.Path, rep.Old.Version, rep.New.Path, rep.New.Version); err != nil {
			return err
		}
	}
	gomod, err := f.Format()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), gomod, 0o644); err != nil {
		return err
	}
	var imports strings.Builder
	get := []string{"get"}
	for _, m := range recipe.Get {
		if m.Path == modulePath {
			fmt.Fprintf(&imports, "\t%q\n", m.Path) // dlock.New
		} else {
			fmt.Fprintf(&imports, "\t_ %q\n", m.Path)
		}
		get = append(get, m.Path+"@"+m.Version)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(preReleaseMain(imports.String())), 0o644); err != nil {
		return err
	}
	env = append(slices.Clone(env),
		"GOPROXY=file://"+filepath.ToSlash(filepath.Join(cache, "cache", "download")),
		"GOMODCACHE="+filepath.Join(tmp, "modcache-prerelease"),
	)
	fmt.Fprintf(log, "pre-release recipe (README.md %s): GOPROXY=%s (third-party modules only)\n", recipeHeading, envValue(env, "GOPROXY"))
	if _, err := goCmd(dir, env, log, get...); err != nil {
		return err
	}
	if _, err := goCmd(dir, env, log, "build", "-o", "app"+exeSuffix(), "."); err != nil {
		return err
	}
	out, err := runCmd(dir, env, log, filepath.Join(dir, "app"+exeSuffix()))
	if err != nil {
		return err
	}
	if want := "pre-release: held app fence true"; strings.TrimSpace(out) != want {
		return fmt.Errorf("the pre-release module printed %q, want %q", strings.TrimSpace(out), want)
	}
	list := []string{"list", "-m"}
	for _, m := range recipe.Get {
		list = append(list, m.Path)
	}
	selected, err := goCmd(dir, env, log, list...)
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(strings.TrimSpace(selected), "\n") {
		r.Installed = append(r.Installed, "pre-release: "+line)
	}
	return nil
}

// preReleaseMain is the pre-release module's program: it imports the
// modules of README's go get line and takes a lock on store/memory.
func preReleaseMain(imports string) string {
	return `package main

import (
	"context"
	"fmt"

	"github.com/dlock-dev/dlock/store/memory"
` + imports + `)

func main() {
	ctx := context.Background()
	l, err := dlock.New(memory.New())
	if err != nil {
		panic(err)
	}
	defer l.Close()
	lease, err := l.Mutex("app").TryLock(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("pre-release: held", lease.Name(), "fence", lease.Fence() > 0)
	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
}
`
}
