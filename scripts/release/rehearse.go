package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// rehearsal is what a rehearsal saw.
type rehearsal struct {
	// VersionLine is the output of the installed `dlock version`.
	VersionLine string
	// Installed lists the dlock modules in the installed binary and in the
	// consumer module, as `go version -m` and `go list -m` print them.
	Installed []string
}

// consumerMain uses the root module, store/goredis and store/etcd as a user
// would, and runs on store/memory so that it needs no server.
const consumerMain = `package main

import (
	"context"
	"fmt"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/etcd"
	"github.com/dlock-dev/dlock/store/goredis"
	"github.com/dlock-dev/dlock/store/memory"
)

var (
	_ = goredis.New
	_ = etcd.New
)

func main() {
	ctx := context.Background()
	l, err := dlock.New(memory.New())
	if err != nil {
		panic(err)
	}
	defer l.Close()
	lease, err := l.Mutex("consumer").TryLock(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("consumer: held", lease.Name(), "fence", lease.Fence() > 0)
	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
}
`

// rehearse checks that every published module importing another's internal
// package requires it at exactly version (checkSeams), packs the published
// modules at version into a file proxy and,
// with an empty module cache and only file proxies (the packed modules, then
// the module cache's download directory for third-party modules), installs
// cmd/dlock at version and runs `dlock version`, then builds and runs a
// consumer module that requires the root, store/goredis and store/etcd at
// version. Last it builds a module by README's recipe for the time before
// any version is published: replace lines to a checkout, and no dlock module
// on any proxy (rehearsePreRelease). Progress goes to log.
func rehearse(root, version string, log io.Writer) (*rehearsal, error) {
	tmp, err := os.MkdirTemp("", "dlock-rehearsal-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	seams, err := checkSeams(root, version)
	if err != nil {
		return nil, err
	}
	for _, s := range seams {
		fmt.Fprintf(log, "released together: %s imports %s and requires %s %s\n", s.Dir, s.Import, pathOf(s.Owner), version)
	}
	proxy := filepath.Join(tmp, "proxy")
	if err := pack(root, version, proxy); err != nil {
		return nil, err
	}
	cache, err := goEnv(root, "GOMODCACHE")
	if err != nil {
		return nil, err
	}
	if err := downloadThirdParty(root, tmp, log); err != nil {
		return nil, err
	}
	env := rehearsalEnv(tmp, proxy, cache)
	fmt.Fprintf(log, "rehearsal %s: GOPROXY=%s GOMODCACHE=%s (empty)\n", version, envValue(env, "GOPROXY"), envValue(env, "GOMODCACHE"))
	r := &rehearsal{}
	if err := rehearseInstall(tmp, version, env, log, r); err != nil {
		return nil, err
	}
	if err := rehearseConsumer(tmp, version, env, log, r); err != nil {
		return nil, err
	}
	if err := rehearsePreRelease(root, tmp, cache, env, log, r); err != nil {
		return nil, err
	}
	return r, nil
}

// downloadThirdParty makes sure the machine's module cache, the rehearsal's
// proxy of third-party modules, holds every module the published go.mod
// files require (they list every module that provides a package of their
// build, at the version a user's build selects): `go mod download` of each,
// outside any module, with the usual GOPROXY. It downloads nothing that the
// tests of the modules already fetched.
func downloadThirdParty(root, tmp string, log io.Writer) error {
	seen := map[string]bool{}
	args := []string{"mod", "download"}
	for _, dir := range published {
		f, err := readMod(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			if mv := r.Mod.Path + "@" + r.Mod.Version; !isSibling(r.Mod.Path) && !seen[mv] {
				seen[mv] = true
				args = append(args, mv)
			}
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "GOWORK" && k != "GOFLAGS" {
			env = append(env, kv)
		}
	}
	env = append(env, "GOWORK=off", "GOFLAGS=")
	start := time.Now()
	if _, err := goCmd(tmp, env, io.Discard, args...); err != nil {
		return err
	}
	fmt.Fprintf(log, "$ go mod download (the %d third-party modules the published go.mod files require)  (%.1fs)\n", len(args)-2, time.Since(start).Seconds())
	return nil
}

// rehearsalEnv is the environment of the rehearsal's go commands: no
// workspace, an empty module cache, the two file proxies and nothing else,
// and no checksum database (none is reachable offline, and the candidate
// versions are in none); the go.sum files of the modules still check every
// third-party module they list. -trimpath keeps the paths of the temporary
// module cache out of the build cache's keys, so that a second rehearsal
// reuses the compiled packages of the first.
func rehearsalEnv(tmp, proxy, cache string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOWORK", "GOPROXY", "GOMODCACHE", "GOFLAGS", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOBIN", "GOTOOLCHAIN", "GOINSECURE":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"GOWORK=off",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(cache, "cache", "download")),
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOFLAGS=-modcacherw -trimpath",
		"GOSUMDB=off",
		"GOBIN="+filepath.Join(tmp, "bin"),
		"GOTOOLCHAIN=local",
	)
}

func rehearseInstall(tmp, version string, env []string, log io.Writer, r *rehearsal) error {
	pkg := modulePath + "/cmd/dlock@" + version
	if _, err := goCmd(tmp, env, log, "install", pkg); err != nil {
		return err
	}
	bin := filepath.Join(tmp, "bin", "dlock"+exeSuffix())
	out, err := runCmd(tmp, env, log, bin, "version")
	if err != nil {
		return err
	}
	r.VersionLine = strings.TrimSpace(out)
	if !strings.HasPrefix(r.VersionLine, "dlock "+version+" ") {
		return fmt.Errorf("dlock version printed %q, want it to start with %q", r.VersionLine, "dlock "+version+" ")
	}
	mods, err := goCmd(tmp, env, log, "version", "-m", bin)
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(mods, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[0] == "mod" || f[0] == "dep") && isSibling(f[1]) {
			r.Installed = append(r.Installed, "dlock binary: "+f[1]+" "+f[2])
		}
	}
	return nil
}

func rehearseConsumer(tmp, version string, env []string, log io.Writer, r *rehearsal) error {
	dir := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/consumer\n\ngo 1.26.0\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(consumerMain), 0o644); err != nil {
		return err
	}
	get, list := []string{"get"}, []string{"list", "-m"}
	for _, m := range []string{".", "store/goredis", "store/etcd"} {
		get = append(get, pathOf(m)+"@"+version)
		list = append(list, pathOf(m))
	}
	if _, err := goCmd(dir, env, log, get...); err != nil {
		return err
	}
	if _, err := goCmd(dir, env, log, "build", "-o", "consumer"+exeSuffix(), "."); err != nil {
		return err
	}
	out, err := runCmd(dir, env, log, filepath.Join(dir, "consumer"+exeSuffix()))
	if err != nil {
		return err
	}
	if want := "consumer: held consumer fence true"; strings.TrimSpace(out) != want {
		return fmt.Errorf("consumer printed %q, want %q", strings.TrimSpace(out), want)
	}
	// Not "all": offline, the module cache has only the go.mod files of
	// modules no package of the build needs, and listing them wants their
	// .info files as well.
	selected, err := goCmd(dir, env, log, list...)
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(selected, "\n") {
		if f := strings.Fields(line); len(f) == 2 && isSibling(f[0]) {
			r.Installed = append(r.Installed, "consumer: "+f[0]+" "+f[1])
		}
	}
	return nil
}

func goCmd(dir string, env []string, log io.Writer, args ...string) (string, error) {
	return runCmd(dir, env, log, filepath.Join(runtime.GOROOT(), "bin", "go"), args...) //nolint:staticcheck // SA1019: the go that runs this tool, whatever PATH says
}

// runCmd runs name in dir and returns its standard output; its standard
// error goes to log, with the command and how long it took.
func runCmd(dir string, env []string, log io.Writer, name string, args ...string) (string, error) {
	start := time.Now()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	fmt.Fprintf(log, "$ %s %s  (%.1fs)\n", filepath.Base(name), strings.Join(args, " "), time.Since(start).Seconds())
	if err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func goEnv(dir, name string) (string, error) {
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "env", name) //nolint:staticcheck // SA1019: the go that runs this tool, whatever PATH says
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

func exeSuffix() string {
	if runtime.GOOS == "windows" {
		return ".exe"
	}
	return ""
}
