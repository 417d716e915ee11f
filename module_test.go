package dlock_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestConsumerModuleGraph builds a throwaway module outside the repository
// that uses the library as a consumer would (dlock and store/valkey, the
// root module through a replace to this checkout) and checks that its
// module graph holds none of the heavy dependencies of the binary and the
// other stores. It runs offline, against the module cache.
func TestConsumerModuleGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/consumer\n\ngo 1.26.0\n\nrequire github.com/dlock-dev/dlock v0.0.0\n\nreplace github.com/dlock-dev/dlock => "+root+"\n")
	write("main.go", `package main

import (
	"context"
	"fmt"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

func main() {
	s, err := valkey.Dial(context.Background(), "redis://127.0.0.1:6379")
	if err != nil {
		fmt.Println(err)
		return
	}
	l, _ := dlock.New(s)
	fmt.Println(l.Mutex("job") != nil)
}
`)
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // SA1019: the test runs where it was built, so GOROOT is right; PATH may lack go
	run := func(args ...string) string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOTOOLCHAIN=local")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		if stderr.Len() > 0 {
			t.Logf("go %s: %s", strings.Join(args, " "), stderr.String())
		}
		return string(out)
	}
	run("build", "./...")
	// -e: offline, the go.mod files of modules that no package of the build
	// needs may be missing from the cache; they are listed all the same.
	graph := run("list", "-m", "-e", "all")
	if !strings.Contains(graph, "github.com/valkey-io/valkey-go") {
		t.Fatalf("go list -m -e all lacks valkey-go:\n%s", graph)
	}
	for _, heavy := range []string{"go.etcd.io/", "google.golang.org/grpc", "github.com/jackc/pgx", "github.com/go-zookeeper/", "go.uber.org/zap", "github.com/prometheus/", "github.com/redis/go-redis", "go.opentelemetry.io/"} {
		for line := range strings.SplitSeq(graph, "\n") {
			if strings.HasPrefix(line, heavy) {
				t.Errorf("a consumer of dlock + store/valkey has %s in its module graph (go list -m all)", line)
			}
		}
	}
	t.Logf("go list -m all: %d modules\n%s", strings.Count(strings.TrimSpace(graph), "\n")+1, graph)

	// What the consumer compiles: the standard library, dlock, valkey-go
	// and what valkey-go itself requires, nothing else (no OpenTelemetry:
	// that is dlockotel's).
	t.Run("BuildsOnlyValkeyGo", func(t *testing.T) {
		allowed := map[string]bool{"example.com/consumer": true, "github.com/dlock-dev/dlock": true, "github.com/valkey-io/valkey-go": true}
		for edge := range strings.SplitSeq(run("mod", "graph"), "\n") {
			from, to, ok := strings.Cut(edge, " ")
			if ok && strings.HasPrefix(from, "github.com/valkey-io/valkey-go@") {
				allowed[strings.Split(to, "@")[0]] = true
			}
		}
		deps := run("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...")
		seen := map[string]bool{}
		for mod := range strings.SplitSeq(strings.TrimSpace(deps), "\n") {
			if mod != "" {
				seen[mod] = true
			}
		}
		for mod := range seen {
			if !allowed[mod] {
				t.Errorf("a consumer of dlock + store/valkey compiles packages of %s; want dlock, valkey-go and valkey-go's requirements only", mod)
			}
		}
		if !seen["github.com/valkey-io/valkey-go"] {
			t.Errorf("go list -deps lacks valkey-go: %v", seen)
		}
	})
}

// TestStoreDependencyDirection checks the dependency direction of
// DESIGN.md §1 within this module: package store imports nothing of this
// repository, and no store (nor what a store builds on) imports the root
// package, directly or through another package of the module. Stores in
// other modules are checked by their own go list -deps (see
// docs/migrating.md).
func TestStoreDependencyDirection(t *testing.T) {
	const mod = "github.com/dlock-dev/dlock"
	// deps returns the packages of this module that path imports,
	// transitively (non-test files only), path included.
	deps := func(path string) map[string]bool {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(p string) {
			if seen[p] {
				return
			}
			seen[p] = true
			dir := "." + strings.TrimPrefix(p, mod)
			bp, err := build.ImportDir(dir, 0)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			for _, imp := range bp.Imports {
				if imp == mod || strings.HasPrefix(imp, mod+"/") {
					walk(imp)
				}
			}
		}
		walk(path)
		return seen
	}
	if d := deps(mod + "/store"); len(d) != 1 {
		t.Errorf("package store imports packages of this repository: %v", d)
	}
	for _, p := range []string{"store/memory", "store/valkey", "store/redlock", "internal/redisproto"} {
		if deps(mod + "/" + p)[mod] {
			t.Errorf("%s imports the root package %s; stores import package store only", p, mod)
		}
	}
}

// TestRootHasNoStoreAPI checks that the root package shows lock users no
// name that only a store implementer needs: those are package store's.
func TestRootHasNoStoreAPI(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					declared[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						declared[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							declared[n.Name] = true
						}
					}
				}
			}
		}
	}
	for _, name := range []string{"Store", "Grant", "MultiStore", "MultiGrant", "GrantWatcher", "FenceRaiser", "Inspector",
		"State", "LockDelayer", "SupportsLockDelay", "Drifter", "Elector", "Pinger", "Broadcaster", "MaxBroadcast", "Coexist"} {
		if declared[name] {
			t.Errorf("package dlock declares %s; it belongs to package store only", name)
		}
	}
}
