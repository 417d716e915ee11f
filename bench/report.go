package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
)

// report is everything one invocation of the driver measured.
type report struct {
	Date     string            `json:"date"`
	Elapsed  string            `json:"elapsed"`
	Machine  map[string]string `json:"machine"`
	Versions map[string]string `json:"versions"`
	Config   map[string]string `json:"config"`
	Cells    []*cell           `json:"cells"`
	Targets  []target          `json:"targets"`
}

// target is one of the goals for dlock, checked on this run.
type target struct {
	Name string  `json:"name"`
	Want string  `json:"want"`
	Got  string  `json:"got"`
	Met  bool    `json:"met"`
	Of   float64 `json:"value"`
}

func newReport(cfg config) *report {
	r := &report{
		Date:     time.Now().UTC().Format("2006-01-02 15:04 MST"),
		Machine:  machine(),
		Versions: versions(),
		Config: map[string]string{
			"runs":          fmt.Sprint(cfg.runs),
			"warm-up":       cfg.warm.String(),
			"measured":      cfg.dur.String(),
			"W3 workers":    fmt.Sprint(cfg.w3Workers),
			"W3 hold":       cfg.w3Hold.String(),
			"W3-net delay":  cfg.netDelay.String(),
			"W6 leases":     fmt.Sprint(cfg.w6N),
			"W6 TTL":        cfg.w6TTL.String(),
			"W6 window":     cfg.w6Window.String(),
			"lock TTL":      lockTTL.String(),
			"poll delay":    pollEvery.String(),
			"quick":         fmt.Sprint(cfg.quick),
			"go-redis pool": "64",
		},
	}
	return r
}

func machine() map[string]string {
	m := map[string]string{
		"cpus":       fmt.Sprint(runtime.NumCPU()),
		"gomaxprocs": fmt.Sprint(runtime.GOMAXPROCS(0)),
		"os/arch":    runtime.GOOS + "/" + runtime.GOARCH,
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		m["memory"] = strings.Join(strings.Fields(strings.TrimPrefix(line, "MemTotal:")), " ")
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m["load average at start"] = strings.Join(f[:3], " ")
		}
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		m["kernel"] = utsString(u.Release[:])
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME="); ok {
				m["os"] = strings.Trim(v, `"`)
			}
		}
	}
	return m
}

func utsString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func versions() map[string]string {
	v := map[string]string{"go": runtime.Version()}
	if p, err := redisPath(); err == nil {
		if out, err := exec.Command(p, "--version").Output(); err == nil {
			v["redis-server"] = strings.TrimSpace(string(out))
		}
	}
	// The library as built: the commit of the working tree, and which of
	// its Go files differed from it.
	if d, ok := libraryCommit(); ok {
		v["dlock"] = d
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/go-redis/v9", "github.com/valkey-io/valkey-go":
				v[d.Path] = d.Version
			}
		}
	}
	return v
}

// libraryCommit is the commit of the library's working tree, with the Go
// and Lua files that differ from it, if any.
func libraryCommit() (string, bool) {
	root, ok := repoRoot()
	if !ok {
		return "", false
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "", false
	}
	d := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "*.go", "*.lua").Output(); err == nil && len(st) > 0 {
		var dirty []string
		for line := range strings.Lines(string(st)) {
			if f := strings.Fields(line); len(f) > 1 {
				dirty = append(dirty, f[len(f)-1])
			}
		}
		d += " + uncommitted changes in " + strings.Join(dirty, ", ")
	}
	return d, true
}

// rootModule is the module path of the library the driver measures.
const rootModule = "github.com/dlock-dev/dlock"

// repoRoot finds the directory of the library's module (the repository
// root, whose go.mod says module rootModule), whatever the working
// directory: it walks up from this source file's directory (where the
// driver was built from; bench/go.mod replaces the library with ../), then
// from the working directory.
func repoRoot() (string, bool) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			if modulePath(filepath.Join(dir, "go.mod")) == rootModule {
				return dir, true
			}
			up := filepath.Dir(dir)
			if up == dir {
				break
			}
			dir = up
		}
	}
	return "", false
}

// modulePath returns the module path declared by the go.mod file at path,
// or "".
func modulePath(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}

func (r *report) cell(id string) *cell {
	for _, c := range r.Cells {
		if c.ID == id {
			return c
		}
	}
	return nil
}

func (r *report) med(id, key string) (float64, bool) {
	c := r.cell(id)
	if c == nil || c.Median == nil {
		return 0, false
	}
	v, ok := c.Median[key]
	return v, ok
}

// rawOf names the baseline cell of a workload.
func rawOf(workload string) string {
	switch workload {
	case "W4-W1", "W4-W2":
		return workload + "/raw-valkeygo-5"
	case "W5":
		return "W2/raw-valkeygo"
	}
	return workload + "/raw-valkeygo"
}

// ratioKeys are the figures given as ratios to the raw baseline.
var ratioKeys = map[string][]string{
	"W1":        {"p50_us", "p99_us", "ops_per_s", "srv_cmds_per_op"},
	"W2":        {"ops_per_s", "p50_us", "p99_us", "srv_cmds_per_op"},
	"W1-same":   {"p50_us", "p99_us", "ops_per_s", "srv_cmds_per_op"},
	"W2-same":   {"ops_per_s", "p50_us", "p99_us", "srv_cmds_per_op"},
	"W3":        {"cs_per_s", "busy", "gap_p50_us", "gap_p99_us", "srv_cmds_per_cs", "wait_p99_ms"},
	"W3-shared": {"cs_per_s", "busy", "gap_p50_us", "gap_p99_us", "srv_cmds_per_cs", "wait_p99_ms"},
	"W3-procs":  {"cs_per_s", "busy", "gap_p50_us", "gap_p99_us", "srv_cmds_per_cs", "wait_p99_ms"},
	"W3-net":    {"cs_per_s", "busy", "gap_p50_us", "gap_p99_us", "srv_cmds_per_cs", "wait_p99_ms"},
	"W4-W1":     {"p50_us", "p99_us", "ops_per_s", "srv_cmds_per_op"},
	"W4-W2":     {"ops_per_s", "p50_us", "p99_us", "srv_cmds_per_op"},
	"W5":        {"ops_per_s", "p50_us", "p99_us"},
}

// finish computes medians, ratios to the raw baseline and the targets.
func (r *report) finish() {
	for _, c := range r.Cells {
		c.Median = median(c.Runs)
	}
	for _, c := range r.Cells {
		raw := r.cell(rawOf(c.Workload))
		keys := ratioKeys[c.Workload]
		if raw == nil || raw.Median == nil || c.Median == nil || len(keys) == 0 {
			continue
		}
		c.Ratio = metrics{}
		for _, k := range keys {
			if b := raw.Median[k]; b != 0 {
				c.Ratio[k] = c.Median[k] / b
			}
		}
	}
	r.Targets = r.targets()
}

func (r *report) rtt() float64 {
	v, _ := r.med("RTT/ping", "plain_p50_us")
	return v
}

// peersOf are the peer libraries of a workload's table (not the raw
// baselines, not dlock's own rows, not valkeylock's one-node stand-in for
// five nodes).
func (r *report) peersOf(workload string) []string {
	var ids []string
	for _, c := range r.Cells {
		n := c.Contender
		if c.Workload != workload || strings.HasPrefix(n, "raw-") || strings.HasPrefix(n, "dlock") || strings.HasSuffix(n, "-1node") {
			continue
		}
		ids = append(ids, c.ID)
	}
	return ids
}

// bestPeer returns the peer with the lowest (low) or highest figure key in
// workload, and that figure.
func (r *report) bestPeer(workload, key string, low bool) (string, float64, bool) {
	var id string
	var best float64
	for _, p := range r.peersOf(workload) {
		v, ok := r.med(p, key)
		if !ok || v <= 0 {
			continue
		}
		if id == "" || (low && v < best) || (!low && v > best) {
			id, best = p, v
		}
	}
	return id[strings.Index(id, "/")+1:], best, id != ""
}

// targets are those of the uncontended-path issue: dlock against the best
// peer and the raw floor of the same run, and the contended lead kept.
func (r *report) targets() []target {
	var ts []target
	add := func(name, want string, got float64, gotS string, met bool) {
		ts = append(ts, target{Name: name, Want: want, Got: gotS, Met: met, Of: got})
	}
	vs := func(id, key, name, peerWorkload string, low bool) {
		d, ok := r.med(id, key)
		peer, p, pok := r.bestPeer(peerWorkload, key, low)
		if !ok || !pok {
			return
		}
		want, met := "≥ the best peer", d >= p
		if low {
			want, met = "≤ the best peer", d <= p
		}
		add(name, want, d/p, fmt.Sprintf("%.2f× %s (%.0f vs %.0f)", d/p, peer, d, p), met)
	}
	// floor adds to the last target how the least fenced lock of the same
	// run (a diagnostic contender) compares with what dlock is held to:
	// the best peer, or the cell against.
	floor := func(target, id, key, workload, against string, low bool) {
		f, ok := r.med(id, key)
		if !ok || len(ts) == 0 || ts[len(ts)-1].Name != target {
			return
		}
		name, v, vok := against, 0.0, false
		if against == "" {
			name, v, vok = r.bestPeer(workload, key, low)
		} else {
			v, vok = r.med(workload+"/"+against, key)
		}
		if vok && v > 0 {
			ts[len(ts)-1].Got += fmt.Sprintf("; the least fenced lock (%s) %.2f× %s", id[strings.Index(id, "/")+1:], f/v, name)
		}
	}
	vs("W1/dlock", "p50_us", "W1 latency p50", "W1", true)
	floor("W1 latency p50", "W1/raw-valkeygo-fenced", "p50_us", "W1", "", true)
	if d, ok := r.med("W1/dlock", "p99_us"); ok {
		if raw, ok := r.med("W1/raw-valkeygo", "p99_us"); ok && raw > 0 {
			add("W1 latency p99", "≤ raw", d/raw, fmt.Sprintf("%.2f× raw (%.0f vs %.0f µs)", d/raw, d, raw), d <= raw)
			floor("W1 latency p99", "W1/raw-valkeygo-fenced", "p99_us", "W1", "raw-valkeygo", true)
		}
	}
	vs("W2/dlock", "ops_per_s", "W2 throughput", "W2", false)
	floor("W2 throughput", "W2/raw-valkeygo-fenced", "ops_per_s", "W2", "", false)
	if d, ok := r.med("W2/dlock", "ops_per_s"); ok {
		if raw, ok := r.med("W2/raw-valkeygo", "ops_per_s"); ok && raw > 0 {
			x := d / raw
			add("W2 throughput, fenced (moonshot)", "≥ 1.0× raw", x, fmt.Sprintf("%.2f× (%.0f vs %.0f ops/s)", x, d, raw), x >= 1.0)
			floor("W2 throughput, fenced (moonshot)", "W2/raw-valkeygo-fenced", "ops_per_s", "W2", "raw-valkeygo", false)
		}
	}
	if d, ok := r.med("W4-W1/dlock-redlock-5", "p50_us"); ok {
		if raw, ok := r.med("W4-W1/raw-valkeygo-5", "p50_us"); ok && raw > 0 {
			x := d / raw
			add("W4 5-node latency p50", "≤ 1.0× raw-5", x, fmt.Sprintf("%.2f× (%.0f vs %.0f µs)", x, d, raw), x <= 1.0)
			floor("W4 5-node latency p50", "W4-W1/raw-valkeygo-fenced-5", "p50_us", "W4-W1", "raw-valkeygo-5", true)
		}
	}
	vs("W4-W2/dlock-redlock-5", "ops_per_s", "W4 5-node throughput", "W4-W2", false)
	floor("W4 5-node throughput", "W4-W2/raw-valkeygo-fenced-5", "ops_per_s", "W4-W2", "", false)
	if h, ok := r.med("W5/dlock-http", "ops_per_s"); ok {
		if l, ok := r.med("W2/dlock", "ops_per_s"); ok && l > 0 {
			x := h / l
			got := fmt.Sprintf("%.2f× (%.0f vs %.0f ops/s)", x, h, l)
			if raw, ok := r.med("W5/nethttp-raw", "ops_per_s"); ok {
				got += fmt.Sprintf("; the least HTTP lock service on raw valkey-go %.2f×", raw/l)
			}
			add("W5 service throughput", "≥ 0.5× the library's W2", x, got, x >= 0.5)
		}
	}
	vs("W3/dlock", "gap_p50_us", "W3 mutex gap p50 (lead kept)", "W3", true)
	vs("W3/dlock", "wait_p99_ms", "W3 mutex wait p99 (lead kept)", "W3", true)
	vs("W3/dlock", "srv_cmds_per_cs", "W3 mutex commands per critical section (lead kept)", "W3", true)
	if n, ok := r.med("W2/dlock", "srv_cmds_per_op"); ok {
		add("server commands per uncontended op", "≤ 5", n, fmt.Sprintf("%.1f", n), n <= 5)
	}
	if d, ok := r.med("W2/dlock", "srv_cpu_us_op"); ok {
		if raw, ok := r.med("W2/raw-valkeygo", "srv_cpu_us_op"); ok && raw > 0 {
			x := d / raw
			add("server CPU per uncontended op", "≤ 1.3× raw", x, fmt.Sprintf("%.2f× (%.0f vs %.0f µs)", x, d, raw), x <= 1.3)
		}
	}
	if h, ok := r.med("W6/dlock", "heap_per_lease_b"); ok {
		add("W6 heap per lease", "≤ 1 KiB", h, fmt.Sprintf("%.0f B", h), h <= 1024)
	}
	if b, ok := r.med("W6/dlock", "leases_per_extend"); ok {
		add("W6 renewals pipelined", "many leases per Extend round trip", b, fmt.Sprintf("%.0f leases per Extend call (one pipelined round trip)", b), b >= 10)
	}
	return ts
}

func (r *report) violations() int {
	n := 0
	for _, c := range r.Cells {
		for _, m := range c.Runs {
			n += int(m["violations"])
		}
	}
	return n
}

func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "chart.svg"), []byte(r.svg()), 0o644)
}

// Markers of the generated part of docs/benchmarks.md.
const (
	docsStart = "<!-- bench:results:start (generated by `cd bench && go run . -docs ../docs/benchmarks.md`; do not edit by hand) -->"
	docsEnd   = "<!-- bench:results:end -->"
)

// updateDocs replaces the generated part of the Markdown file at path
// (between docsStart and docsEnd) with this report's tables, headings one
// level down, and the chart linked relative to path.
func (r *report) updateDocs(path, outDir string) error {
	return replaceGenerated(path, docsStart, docsEnd, outDir, func(rel string) string {
		body := r.markdown()
		body = body[strings.Index(body, "\n")+1:] // drop the title
		var sb strings.Builder
		for line := range strings.Lines(body) {
			if strings.HasPrefix(line, "#") {
				line = "#" + line
			}
			sb.WriteString(line)
		}
		return strings.ReplaceAll(sb.String(), "](chart.svg)", "]("+rel+"/chart.svg)")
	})
}

// replaceGenerated replaces what stands between the markers start and end
// in the Markdown file at path with body(rel), rel being outDir relative to
// the file's directory (slash-separated), for the links to its plots.
func replaceGenerated(path, start, end, outDir string, body func(rel string) string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(b)
	i, j := strings.Index(doc, start), strings.Index(doc, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: markers %q and %q not found", path, start, end)
	}
	absOut, err := filepath.Abs(outDir)
	if err != nil {
		return err
	}
	absDoc, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(absDoc, absOut)
	if err != nil {
		return err
	}
	doc = doc[:i] + start + "\n\n" + body(filepath.ToSlash(rel)) + "\n" + doc[j:]
	return os.WriteFile(path, []byte(doc), 0o644)
}

// load reads a report written by write, for re-rendering.
func load(path string) (*report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := &report{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.finish()
	return r, nil
}
