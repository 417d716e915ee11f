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

// TestTargetsShowTheFencedFloor: a target of the uncontended path names
// how the least fenced lock of the same run compares with what dlock is
// held to, so that a missed target shows its floor.
func TestTargetsShowTheFencedFloor(t *testing.T) {
	c := func(workload, contender string, m map[string]float64) *cell {
		return &cell{ID: workload + "/" + contender, Workload: workload, Contender: contender, Median: m}
	}
	r := &report{Cells: []*cell{
		c("W1", "raw-valkeygo", map[string]float64{"p50_us": 100, "p99_us": 200}),
		c("W1", "dlock", map[string]float64{"p50_us": 130, "p99_us": 260}),
		c("W1", "redislock", map[string]float64{"p50_us": 110, "p99_us": 220}),
		c("W1", "raw-valkeygo-fenced", map[string]float64{"p50_us": 121, "p99_us": 240}),
	}}
	got := map[string]string{}
	for _, tg := range r.targets() {
		got[tg.Name] = tg.Got
	}
	if want := "1.18× redislock (130 vs 110); the least fenced lock (raw-valkeygo-fenced) 1.10× redislock"; got["W1 latency p50"] != want {
		t.Errorf("W1 latency p50: %q, want %q", got["W1 latency p50"], want)
	}
	if want := "1.30× raw (260 vs 200 µs); the least fenced lock (raw-valkeygo-fenced) 1.20× raw-valkeygo"; got["W1 latency p99"] != want {
		t.Errorf("W1 latency p99: %q, want %q", got["W1 latency p99"], want)
	}
}
