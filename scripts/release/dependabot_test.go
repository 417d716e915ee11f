package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// dependabotConfig is the part of .github/dependabot.yml the test reads.
type dependabotConfig struct {
	Version int `yaml:"version"`
	Updates []struct {
		Ecosystem   string   `yaml:"package-ecosystem"`
		Directory   string   `yaml:"directory"`
		Directories []string `yaml:"directories"`
	} `yaml:"updates"`
}

// manifests names, for each ecosystem Dependabot updates here, the file that
// makes a directory one of its projects.
var manifests = map[string]string{
	"gomod": "go.mod",
	"npm":   "package.json",
	"pip":   "pyproject.toml",
}

// TestDependabotCoversEveryModule: every directory of the tree holding a
// go.mod (as scripts/test.sh finds them), and every client under clients/
// with a package.json or pyproject.toml, is listed in .github/dependabot.yml
// under its ecosystem; and every listed directory still holds that file. A
// new module cannot be forgotten.
func TestDependabotCoversEveryModule(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	listed, err := readDependabot(filepath.Join(root, ".github", "dependabot.yml"))
	if err != nil {
		t.Fatal(err)
	}
	found, err := findManifests(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(found["gomod"]) < 2 || len(found["npm"]) == 0 || len(found["pip"]) == 0 {
		t.Fatalf("found %v: want the modules and both clients (is this the repository?)", found)
	}
	for eco, dirs := range found {
		for _, d := range dirs {
			if !slices.Contains(listed[eco], d) {
				t.Errorf(".github/dependabot.yml: %s (holds %s) is not among the %s directories %q", d, manifests[eco], eco, listed[eco])
			}
		}
	}
	for eco, dirs := range listed {
		for _, d := range dirs {
			if !slices.Contains(found[eco], d) {
				t.Errorf(".github/dependabot.yml lists %s under %s, but the tree has no %s there", d, eco, manifests[eco])
			}
		}
	}
}

// readDependabot returns the directories of each ecosystem in file, as
// "/path" (the root is "/").
func readDependabot(file string) (map[string][]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var cfg dependabotConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, u := range cfg.Updates {
		dirs := u.Directories
		if u.Directory != "" {
			dirs = append(dirs, u.Directory)
		}
		for _, d := range dirs {
			out[u.Ecosystem] = append(out[u.Ecosystem], "/"+strings.Trim(d, "/"))
		}
	}
	return out, nil
}

// findManifests walks the tree as scripts/test.sh does (skipping .git,
// testdata and node_modules) for go.mod files, and clients/ for the clients'
// package files.
func findManifests(root string) (map[string][]string, error) {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules", ".cache", "dist":
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir := "/" + filepath.ToSlash(rel)
		if rel == "." {
			dir = "/"
		}
		for eco, name := range manifests {
			if d.Name() != name {
				continue
			}
			if eco == "gomod" || strings.HasPrefix(dir, "/clients/") {
				out[eco] = append(out[eco], dir)
			}
		}
		return nil
	})
	return out, err
}
