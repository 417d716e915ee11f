package main

import (
	"archive/zip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	modzip "golang.org/x/mod/zip"
)

// TestRehearsal is the release rehearsal of scripts/test.sh: the published
// modules of the working tree, packed at the version the modules require of
// each other, install and build from file proxies alone with an empty module
// cache (see rehearse). It fails while any published go.mod has a replace
// directive or requires a sibling at a version that is not packed.
func TestRehearsal(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	version, err := requiredVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	r, err := rehearse(root, version, &log)
	t.Log("\n" + log.String())
	if err != nil {
		t.Fatalf("rehearse(%s): %v", version, err)
	}
	t.Logf("dlock version: %s", r.VersionLine)
	for _, m := range r.Installed {
		t.Log(m)
	}
	for _, want := range []string{
		"dlock binary: github.com/dlock-dev/dlock/cmd/dlock " + version,
		"dlock binary: github.com/dlock-dev/dlock " + version,
		"dlock binary: github.com/dlock-dev/dlock/store/etcd " + version,
		"consumer: github.com/dlock-dev/dlock " + version,
		"consumer: github.com/dlock-dev/dlock/store/goredis " + version,
		"consumer: github.com/dlock-dev/dlock/store/etcd " + version,
		// README's recipe for the time before v0.1.0 is published (remove
		// this line with that section, after the first release).
		"pre-release: github.com/dlock-dev/dlock " + version + " => ../dlock",
	} {
		if !contains(r.Installed, want) {
			t.Errorf("rehearsal installed %q, want %q among them", r.Installed, want)
		}
	}
}

// TestReadmeGoGetClaim: while README.md has its pre-release section (no
// version published), every paragraph that says `go get
// github.com/dlock-dev/dlock` outside that section links to it, and the
// section's recipe is complete (a replace line per library module). The
// recipe itself is built by TestRehearsal.
func TestReadmeGoGetClaim(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	recipe, err := readRecipe(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := recipe.check(); err != nil {
		t.Error(err)
	}
	anchor := "(#" + strings.NewReplacer(" ", "-", ".", "").Replace(strings.ToLower(strings.TrimLeft(recipeHeading, "# "))) + ")"
	outside, section, _ := strings.Cut(string(b), "\n"+recipeHeading+"\n")
	if i := strings.Index(section, "\n#"); i >= 0 {
		outside += section[i:]
	}
	for _, p := range strings.Split(outside, "\n\n") {
		if strings.Contains(p, "go get github.com/dlock-dev/dlock") && !strings.Contains(p, anchor) {
			t.Errorf("README.md says `go get github.com/dlock-dev/dlock` without pointing at %s, while no version is published:\n%s", anchor, p)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestPackLayout checks the proxy pack writes: every published module has
// list, .info, .mod and a zip that golang.org/x/mod/zip accepts, and a
// module's zip holds none of the files of the modules nested in it.
func TestPackLayout(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := pack(root, "v0.9.9", out); err != nil {
		t.Fatal(err)
	}
	for _, dir := range published {
		at := filepath.Join(out, filepath.FromSlash(pathOf(dir)), "@v")
		for _, name := range []string{"list", "v0.9.9.info", "v0.9.9.mod", "v0.9.9.zip"} {
			if _, err := os.Stat(filepath.Join(at, name)); err != nil {
				t.Errorf("pack: %v", err)
			}
		}
		zipFile := filepath.Join(at, "v0.9.9.zip")
		if _, err := modzip.CheckZip(modVersion(dir, "v0.9.9"), zipFile); err != nil {
			t.Errorf("CheckZip(%s): %v", pathOf(dir), err)
		}
		names := zipNames(t, zipFile)
		prefix := pathOf(dir) + "@v0.9.9/"
		if !contains(names, prefix+"go.mod") {
			t.Errorf("zip of %s lacks go.mod", pathOf(dir))
		}
		for _, n := range names {
			rel := strings.TrimPrefix(n, prefix)
			if strings.HasSuffix(rel, "/go.mod") {
				t.Errorf("zip of %s holds %s, a nested module's go.mod", pathOf(dir), rel)
			}
		}
	}
	rootNames := zipNames(t, filepath.Join(out, filepath.FromSlash(modulePath), "@v", "v0.9.9.zip"))
	for _, n := range rootNames {
		for _, nested := range []string{"cmd/dlock/", "store/etcd/", "scripts/release/", "bench/", "e2e/"} {
			if strings.HasPrefix(n, modulePath+"@v0.9.9/"+nested) {
				t.Fatalf("root zip holds %s, a file of the nested module %s", n, nested)
			}
		}
	}
	if !contains(rootNames, modulePath+"@v0.9.9/store/valkey/valkey.go") {
		t.Errorf("root zip lacks store/valkey/valkey.go (store/valkey is a package of the root module)")
	}
}

func zipNames(t *testing.T, file string) []string {
	t.Helper()
	z, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	var names []string
	for _, f := range z.File {
		names = append(names, f.Name)
	}
	return names
}

// TestBump checks that bump moves every sibling requirement of every go.mod
// and the versioned replacements of go.work to the new version, and leaves
// third-party requirements alone.
func TestBump(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module github.com/dlock-dev/dlock\n\ngo 1.26.0\n\nrequire github.com/valkey-io/valkey-go v1.0.79\n")
	write("cmd/dlock/go.mod", "module github.com/dlock-dev/dlock/cmd/dlock\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/dlock-dev/dlock v0.1.0\n\tgithub.com/dlock-dev/dlock/store/etcd v0.1.0\n\tgolang.org/x/sys v0.49.0\n)\n")
	write("go.work", "go 1.26.0\n\nuse (\n\t.\n\t./cmd/dlock\n)\n\nreplace (\n\tgithub.com/dlock-dev/dlock v0.1.0 => ./\n\tgithub.com/dlock-dev/dlock/store/etcd v0.1.0 => ./store/etcd\n)\n")
	if err := bump(dir, "v0.2.0"); err != nil {
		t.Fatal(err)
	}
	f, err := readMod(filepath.Join(dir, "cmd/dlock/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range f.Require {
		got[r.Mod.Path] = r.Mod.Version
	}
	want := map[string]string{"github.com/dlock-dev/dlock": "v0.2.0", "github.com/dlock-dev/dlock/store/etcd": "v0.2.0", "golang.org/x/sys": "v0.49.0"}
	for p, v := range want {
		if got[p] != v {
			t.Errorf("after bump, cmd/dlock requires %s %s, want %s", p, got[p], v)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Replace) != 2 {
		t.Fatalf("after bump, go.work has %d replacements, want 2:\n%s", len(w.Replace), data)
	}
	for _, r := range w.Replace {
		if r.Old.Version != "v0.2.0" {
			t.Errorf("after bump, go.work replaces %s %s, want v0.2.0", r.Old.Path, r.Old.Version)
		}
	}
	write("store/etcd/go.mod", "module github.com/dlock-dev/dlock/store/etcd\n\ngo 1.26.0\n\nreplace github.com/dlock-dev/dlock => ../..\n")
	if err := bump(dir, "v0.3.0"); err == nil || !strings.Contains(err.Error(), "replace") {
		t.Errorf("bump over a go.mod with a replace = %v, want an error naming the replace", err)
	}
}

func TestCheckVersion(t *testing.T) {
	for _, tt := range []struct {
		v  string
		ok bool
	}{{"v0.1.0", true}, {"v1.2.3", true}, {"v0.2.0-rc.1", true}, {"0.1.0", false}, {"v0.1", false}, {"v2.0.0", false}, {"latest", false}} {
		if err := checkVersion(tt.v); (err == nil) != tt.ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", tt.v, err, tt.ok)
		}
	}
}

// TestBumpKeepsTheReplaceBlock checks that bump leaves go.work as it is when
// the versions are already right, and changes only the versions otherwise.
func TestBumpKeepsTheReplaceBlock(t *testing.T) {
	dir := t.TempDir()
	work := "go 1.26.0\n\nuse (\n\t.\n\t./store/etcd\n)\n\nreplace (\n\tgithub.com/dlock-dev/dlock v0.1.0 => ./\n\tgithub.com/dlock-dev/dlock/store/etcd v0.1.0 => ./store/etcd\n)\n"
	if err := os.WriteFile(filepath.Join(dir, "go.work"), []byte(work), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := bumpWork(filepath.Join(dir, "go.work"), "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "go.work")); string(got) != work {
		t.Errorf("bumpWork to the same version rewrote go.work:\n%s\nwant\n%s", got, work)
	}
	if err := bumpWork(filepath.Join(dir, "go.work"), "v0.2.0"); err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(work, "v0.1.0", "v0.2.0")
	if got, _ := os.ReadFile(filepath.Join(dir, "go.work")); string(got) != want {
		t.Errorf("bumpWork to v0.2.0 wrote:\n%s\nwant\n%s", got, want)
	}
}

// TestSeams: store/goredis imports the root's internal/redisproto, so the
// rehearsal requires goredis to require the root at exactly the version it
// rehearses; a copy of the tree whose goredis requires another version is
// refused, naming the module, the package and both versions.
func TestSeams(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	version, err := requiredVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	seams, err := checkSeams(root, version)
	if err != nil {
		t.Fatalf("checkSeams(tree, %s): %v", version, err)
	}
	want := seam{Dir: "store/goredis", Import: modulePath + "/internal/redisproto", Owner: "."}
	if !slices.Contains(seams, want) {
		t.Fatalf("checkSeams(tree) = %+v, want %+v among them", seams, want)
	}

	// A tree of the published go.mod files and goredis's import, where
	// goredis requires an older root.
	tmp := t.TempDir()
	for _, dir := range published {
		data, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if dir == "store/goredis" {
			data = []byte(strings.Replace(string(data), modulePath+" "+version, modulePath+" v0.0.9", 1))
		}
		if err := os.MkdirAll(filepath.Join(tmp, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, dir, "go.mod"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := "package goredis\n\nimport _ \"" + want.Import + "\"\n"
	if err := os.WriteFile(filepath.Join(tmp, "store/goredis/client.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = checkSeams(tmp, version)
	if err == nil {
		t.Fatalf("checkSeams(goredis requiring v0.0.9, %s) = nil, want an error", version)
	}
	for _, s := range []string{"store/goredis", want.Import, "v0.0.9", version} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("checkSeams error %q does not name %q", err, s)
		}
	}
}
