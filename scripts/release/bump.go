package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/mod/modfile"
)

// bump sets every requirement on a module of this repository, in every
// go.mod of it, to version, and the versioned replacements of go.work that
// point those versions at the working tree.
func bump(root, version string) error {
	var mods []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			mods = append(mods, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, file := range mods {
		f, err := readMod(file)
		if err != nil {
			return err
		}
		if len(f.Replace) > 0 {
			return fmt.Errorf("%s: replace directives; a published go.mod has none (go.work joins the modules)", file)
		}
	}
	for _, file := range mods {
		if err := bumpMod(file, version); err != nil {
			return err
		}
	}
	return bumpWork(filepath.Join(root, "go.work"), version)
}

func bumpMod(file, version string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	f, err := modfile.Parse(file, data, nil)
	if err != nil {
		return err
	}
	for _, r := range f.Require {
		if isSibling(r.Mod.Path) && r.Mod.Version != version {
			if err := f.AddRequire(r.Mod.Path, version); err != nil {
				return err
			}
		}
	}
	return writeIfChanged(file, data, modfile.Format(f.Syntax))
}

func bumpWork(file, version string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	w, err := modfile.ParseWork(file, data, nil)
	if err != nil {
		return err
	}
	// Each replacement's line keeps its place (and its block): only the
	// version token changes.
	for _, r := range w.Replace {
		if !isSibling(r.Old.Path) || r.Old.Version == version {
			continue
		}
		tok := r.Syntax.Token
		i := 1 // in a replace block: path, version, =>, dir
		if len(tok) > 0 && tok[0] == "replace" {
			i = 2
		}
		if len(tok) <= i || tok[i] != r.Old.Version {
			return fmt.Errorf("%s:%d: cannot find the version of %s", file, r.Syntax.Start.Line, r.Old.Path)
		}
		tok[i] = version
		r.Old.Version = version
	}
	w.Cleanup()
	return writeIfChanged(file, data, modfile.Format(w.Syntax))
}

func writeIfChanged(file string, old, data []byte) error {
	if bytes.Equal(old, data) {
		return nil
	}
	fmt.Println("updated", file)
	return os.WriteFile(file, data, 0o644)
}
