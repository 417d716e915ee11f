package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// pack writes every published module of the working tree at version into
// out in the layout of the Go module proxy protocol ($GOPROXY/<module>/@v/
// list, VERSION.info, VERSION.mod, VERSION.zip), so that GOPROXY=file://out
// serves them. A module's files are those git would commit: tracked files
// and untracked ones that .gitignore does not exclude, minus the
// subdirectories that are modules of their own (as the proxy's zips of a
// tag hold).
func pack(root, version, out string) error {
	files, err := gitFiles(root)
	if err != nil {
		return err
	}
	for _, dir := range published {
		if err := packModule(root, dir, version, out, files); err != nil {
			return fmt.Errorf("pack %s: %w", pathOf(dir), err)
		}
	}
	return nil
}

func packModule(root, dir, version, out string, all []string) error {
	mv := modVersion(dir, version)
	esc, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	at := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(root, dir, "go.mod"))
	if err != nil {
		return err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	z, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		return err
	}
	err = modzip.Create(z, mv, moduleFiles(root, dir, all))
	if cerr := z.Close(); err == nil {
		err = cerr
	}
	return err
}

// gitFiles lists the files of the working tree git would commit, relative
// to root, with slashes.
func gitFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %v: %s", err, stderr.String())
	}
	var files []string
	for f := range strings.SplitSeq(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err != nil {
			continue // deleted in the working tree, not yet in the index
		}
		files = append(files, f)
	}
	return files, nil
}

// moduleFiles picks the files of the module in dir: below dir, and not
// below a deeper directory that holds a go.mod.
func moduleFiles(root, dir string, all []string) []modzip.File {
	prefix := ""
	if dir != "." {
		prefix = filepath.ToSlash(dir) + "/"
	}
	nested := map[string]bool{}
	for _, f := range all {
		if path.Base(f) == "go.mod" && strings.HasPrefix(f, prefix) && f != prefix+"go.mod" {
			nested[path.Dir(f)+"/"] = true
		}
	}
	var files []modzip.File
next:
	for _, f := range all {
		if !strings.HasPrefix(f, prefix) {
			continue
		}
		for n := range nested {
			if strings.HasPrefix(f, n) {
				continue next
			}
		}
		files = append(files, file{root: root, rel: f, name: strings.TrimPrefix(f, prefix)})
	}
	return files
}

// file is a file of the working tree as golang.org/x/mod/zip reads it.
type file struct{ root, rel, name string }

func (f file) Path() string { return f.name }

func (f file) Lstat() (os.FileInfo, error) {
	return os.Lstat(filepath.Join(f.root, filepath.FromSlash(f.rel)))
}

func (f file) Open() (io.ReadCloser, error) {
	return os.Open(filepath.Join(f.root, filepath.FromSlash(f.rel)))
}

func modVersion(dir, version string) module.Version {
	return module.Version{Path: pathOf(dir), Version: version}
}
