package main

import (
	"os/exec"
	"testing"
)

// TestRepoRoot checks that the report finds the library's commit whatever
// the working directory: the repository root (`go run ./bench`), bench/,
// and somewhere else.
func TestRepoRoot(t *testing.T) {
	root, ok := repoRoot()
	if !ok || modulePath(root+"/go.mod") != rootModule {
		t.Fatalf("repoRoot = %q, %v", root, ok)
	}
	if err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Run(); err != nil {
		t.Skipf("no git repository at %s: %v", root, err)
	}
	for _, dir := range []string{root, root + "/bench", t.TempDir()} {
		t.Chdir(dir)
		if v := versions(); v["dlock"] == "" {
			t.Errorf("from %s: versions has no dlock commit: %v", dir, v)
		}
	}
}
