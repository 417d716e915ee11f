package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// tidy runs `go mod tidy` in the module directories dirs (relative to root)
// outside the workspace, which `go mod tidy` ignores anyway: the published
// modules of the working tree are served at version from a proxy packed in a
// temporary directory, third-party modules from the module cache's download
// directory or else the usual GOPROXY, and the
// module cache is a temporary one, so that the packed modules never enter
// the user's. The siblings' lines that tidy writes to go.sum are removed:
// the hashes of an unreleased tree are not those of the tag.
func tidy(root, version string, dirs []string, log io.Writer) error {
	tmp, err := os.MkdirTemp("", "dlock-tidy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	proxy := filepath.Join(tmp, "proxy")
	if err := pack(root, version, proxy); err != nil {
		return err
	}
	upstream, err := goEnv(root, "GOPROXY")
	if err != nil {
		return err
	}
	cache, err := goEnv(root, "GOMODCACHE")
	if err != nil {
		return err
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "GOWORK" && k != "GOPROXY" && k != "GOMODCACHE" && k != "GOFLAGS" && k != "GONOSUMDB" {
			env = append(env, kv)
		}
	}
	env = append(env, "GOWORK=off", "GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(cache, "cache", "download"))+","+upstream,
		"GOMODCACHE="+filepath.Join(tmp, "modcache"), "GOFLAGS=-modcacherw", "GONOSUMDB="+modulePath)
	for _, dir := range dirs {
		if _, err := goCmd(filepath.Join(root, dir), env, log, "mod", "tidy"); err != nil {
			return err
		}
		if err := dropSiblingSums(filepath.Join(root, dir, "go.sum")); err != nil {
			return err
		}
	}
	return nil
}

func dropSiblingSums(file string) error {
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var out bytes.Buffer
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) > 0 && isSibling(f[0]) {
			continue
		}
		out.WriteString(line)
	}
	if bytes.Equal(out.Bytes(), data) {
		return nil
	}
	fmt.Println("removed the siblings' lines of", file)
	return os.WriteFile(file, out.Bytes(), 0o644)
}
