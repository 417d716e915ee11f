package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestScaleQuick runs every scaling curve at its quick sizes and checks
// that every point produced figures, the files are written, and the
// figures that do not depend on speed hold: nothing violated mutual
// exclusion, no lease was lost, the raw baseline leaves no key behind,
// every stream (more than `dlock serve`'s default limit of 64) got every
// event. It asserts nothing about speed.
func TestScaleQuick(t *testing.T) {
	if _, err := redisPath(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cfg := quickScaleConfig()
	cfg.out = t.TempDir()
	rep, err := runScale(t.Context(), cfg, testWriter{t})
	if err != nil {
		t.Fatalf("runScale = %v", err)
	}
	if err := rep.write(cfg.out); err != nil {
		t.Fatalf("write = %v", err)
	}
	want := len(cfg.names)*len(namesContenders()) + len(cfg.waiters)*len(waitersContenders()) + len(cfg.leases) +
		len(cfg.serve) + len(cfg.subscribers) + len(cfg.masters)*len(clusterContenders())
	if len(rep.Points) != want {
		t.Errorf("%d points, want %d", len(rep.Points), want)
	}
	for _, p := range rep.Points {
		id := p.Curve + "/" + p.Contender + "/" + strconv.Itoa(p.X)
		if p.Err != "" || len(p.M) == 0 {
			t.Errorf("%s: error %q, %d figures", id, p.Err, len(p.M))
			continue
		}
		switch {
		case p.Curve == "names" && p.Contender == "raw-valkeygo" && p.M["keys_after"] != 0:
			t.Errorf("%s: %v keys after, want 0 (every key deleted)", id, p.M["keys_after"])
		case p.Curve == "waiters" && p.M["cs_per_s"] == 0:
			t.Errorf("%s: no critical section", id)
		case p.Curve == "leases" && p.M["lost"] != 0:
			t.Errorf("%s: %v leases lost", id, p.M["lost"])
		case p.Curve == "serve" && (p.M["errors"] != 0 || p.M["handoffs_per_s"] == 0 || p.M["goroutines_per_waiter"] <= 0):
			t.Errorf("%s: %v errors, %v handoffs/s, %v goroutines per waiter", id, p.M["errors"], p.M["handoffs_per_s"], p.M["goroutines_per_waiter"])
		case p.Curve == "events" && (p.M["deliveries_missing"] != 0 || p.M["subscribers"] != float64(p.X)):
			t.Errorf("%s: %v deliveries missing", id, p.M["deliveries_missing"])
		case p.Curve == "cluster" && (p.M["errors"] != 0 || p.M["ops_per_s"] == 0):
			t.Errorf("%s: %v errors, %v ops/s", id, p.M["errors"], p.M["ops_per_s"])
		}
	}
	if n := rep.violations(); n != 0 {
		t.Errorf("violations = %d, want 0", n)
	}
	files := []string{"scale.json", "scale.md"}
	for _, d := range curveDefs() {
		files = append(files, "scale-"+d.curve+".svg")
	}
	for _, f := range files {
		if fi, err := os.Stat(filepath.Join(cfg.out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("output %s: %v", f, err)
		}
	}
	md := rep.markdown("")
	for _, d := range curveDefs() {
		if !strings.Contains(md, "### "+d.title) {
			t.Errorf("scale.md lacks the curve %q", d.title)
		}
	}
}

// TestScaleChartDegenerate renders charts whose values are all zero, or
// missing, on linear and log scales: the plot ends (a log axis over zeros
// once looped forever) and draws no NaN.
func TestScaleChartDegenerate(t *testing.T) {
	r := &scaleReport{}
	for _, x := range []int{10, 100, 1000} {
		r.Points = append(r.Points,
			&scalePoint{Curve: "names", Contender: "raw-valkeygo", X: x, M: metrics{"keys_after": 0, "ops_per_s": 0}},
			&scalePoint{Curve: "waiters", Contender: "dlock", X: x, Err: "failed"},
			&scalePoint{Curve: "cluster", Contender: "dlock", X: 1, M: metrics{}})
	}
	for _, ch := range r.charts() {
		svg := ch.svg()
		if !strings.HasSuffix(svg, "</svg>\n") || strings.Contains(svg, "NaN") || strings.Contains(svg, "Inf") {
			t.Errorf("%s: %d bytes, NaN %v, Inf %v", ch.file, len(svg), strings.Contains(svg, "NaN"), strings.Contains(svg, "Inf"))
		}
	}
}
