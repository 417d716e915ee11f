package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// modulePath is the root module; every module of the repository is below it.
const modulePath = "github.com/dlock-dev/dlock"

// published are the directories of the modules users install or import, the
// root first and each after the modules it requires. bench, e2e,
// store/postgres/storebench and scripts/release are not published: they
// are built through go.work only.
var published = []string{".", "dlockotel", "dlockprom", "store/etcd", "store/goredis", "store/postgres", "store/zookeeper", "cmd/dlock"}

// pathOf is the module path of the module in dir (relative to the root).
func pathOf(dir string) string {
	if dir == "." {
		return modulePath
	}
	return modulePath + "/" + filepath.ToSlash(dir)
}

// tagOf is the tag of the module in dir at version: a module in a
// subdirectory is tagged with its directory as a prefix.
func tagOf(dir, version string) string {
	if dir == "." {
		return version
	}
	return filepath.ToSlash(dir) + "/" + version
}

func tags(version string) []string {
	var out []string
	for _, dir := range published {
		out = append(out, tagOf(dir, version))
	}
	return out
}

func isSibling(path string) bool {
	return path == modulePath || strings.HasPrefix(path, modulePath+"/")
}

func checkVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Major(v) != "v0" && semver.Major(v) != "v1" {
		return fmt.Errorf("version %q: want a canonical semantic version vX.Y.Z below v2 (the module paths have no /vN suffix)", v)
	}
	return nil
}

// repoRoot is the nearest directory above the working directory that holds
// go.work.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the working directory: run inside the dlock repository")
		}
		dir = parent
	}
}

// requiredVersion is the version at which cmd/dlock requires the root module:
// the release the tree is being prepared for.
func requiredVersion(root string) (string, error) {
	f, err := readMod(filepath.Join(root, "cmd/dlock/go.mod"))
	if err != nil {
		return "", err
	}
	for _, r := range f.Require {
		if r.Mod.Path == modulePath {
			return r.Mod.Version, nil
		}
	}
	return "", fmt.Errorf("cmd/dlock/go.mod does not require %s", modulePath)
}

func readMod(file string) (*modfile.File, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(file, data, nil)
}
