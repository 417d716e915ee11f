package soak

import (
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// report is what a run measured; write renders it as docs/soak.md and an
// SVG plot beside it.
type report struct {
	dur, traffic, step time.Duration
	seed               uint64
	t0                 int64 // CLOCK_MONOTONIC at the start
	samples            []sample
	faults             []faultEvent
	faultSummary       string
	nfaults            int

	grants, holds, empty, long, overlaps, semOver, dups, order, reentries int64
	violations                                                            []string
	reg                                                                   regTotals
	out                                                                   *outcomes

	keys0, keysEnd, fenceKeys int
	maxFencePTTL              time.Duration
	drained                   bool

	libG0, libG, tpG0, tpG, libFD0, libFD, tpFD int
	libHeap0, libHeap                           uint64
	srvG0, srvG, srvHeap0, srvHeap              float64
	srvFD0, srvFD                               int
	srvUp                                       time.Duration
	libOK, srvOK, failed                        bool
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func (r *report) summary() string {
	return fmt.Sprintf("grants %d (holds checked %d), faults %d; overlaps %d, semaphore over-limit %d, fence dups %d, fence order %d (re-entries of an unconfirmed release %d); "+
		"register writes %d accepted %d, stale accepted %d, stale rejected %d, lost %d; keys %d -> %d (fence counters %d); "+
		"lib goroutines %d -> %d, fds %d -> %d, heap %s -> %s; serve goroutines %.0f -> %.0f, fds %d -> %d, heap %s -> %s",
		r.grants, r.holds, r.nfaults, r.overlaps, r.semOver, r.dups, r.order, r.reentries,
		r.reg.writes, r.reg.accepted, r.reg.staleAccepted, r.reg.staleRejected, r.reg.lost, r.keys0, r.keysEnd, r.fenceKeys,
		r.libG0, r.libG, r.libFD0, r.libFD, mib(float64(r.libHeap0)), mib(float64(r.libHeap)),
		r.srvG0, r.srvG, r.srvFD0, r.srvFD, mib(r.srvHeap0), mib(r.srvHeap))
}

func (r *report) write(path string) error {
	svgName := strings.TrimSuffix(filepath.Base(path), ".md") + ".svg"
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), svgName), []byte(r.svg()), 0o644); err != nil {
		return err
	}
	verdict := "**pass**"
	if r.failed {
		verdict = "**FAIL**"
	}
	ok := func(b bool) string {
		if b {
			return "within"
		}
		return "**beyond**"
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`# Soak: every lock kind, on the library and the service, under random faults

This page is written by the soak test (package `+"`e2e/soak`"+`, `+"`TestSoak`"+`); the
figures and the plot below are those of the last long run. Run it with

`+"```sh"+`
cd e2e
go test -count=1 -v -timeout 60m ./soak -run TestSoak -soak 30m   # or DLOCK_LONG=1
go test -count=1 -v ./soak -run TestSoak -soak 30m -seed N          # replay a seed's faults
`+"```"+`

Without `+"`DLOCK_LONG`"+` or `+"`-soak`"+` it runs a %v smoke version (part of
`+"`scripts/test.sh`"+`'s default profile), which writes its report to a temporary
directory instead of this page.

## What runs

- One Valkey node (`+"`redis-server`"+` with an fsync-always append-only file, so
  a killed and restarted node keeps its keys), reached by every client
  through its own toxiproxy link.
- **Library traffic** in the test process: %d Lockers on their own links, %d
  goroutines each, looping over names %q and every kind (mutex, reentrant
  with re-entry, read, write, fair, semaphore of %d permits); two in three
  acquires wait (up to %v), a quarter of those are cancelled mid-wait
  (context deadline under 100 ms); one lease in five is auto-renewed (TTL
  %v) and held past its TTL; the others use TTL %v.
- **Worker processes** (`+"`e2e/cmd/worker`"+`, %d at a time): careful
  read-modify-write holders of a mutex, read, write or fair lock (TTL %v,
  no renewal), on their own links to the node and to the register.
- **HTTP clients** (%d goroutines) of a `+"`dlock serve`"+` process on the same node,
  through their own link: `+"`/v1`"+` leases of every kind, waits (some abandoned
  by hanging up), one in five extended by the client while held past its TTL.
- Every exclusive holder reads the name's cell of a fenced register and
  writes it back incremented, under its fence; readers read it.
- **Faults**, one at a time every %v-%v (seeded): SIGSTOP/SIGCONT of the
  node (0.2-1.5 s), SIGKILL and restart of the node, SIGSTOP of `+"`dlock serve`"+`
  (0.2-2 s), SIGKILL and restart of `+"`dlock serve`"+` (first 60%% of the run
  only, so the last instance serves long enough for its growth to show),
  100-800 ms latency on one link (0.5-3 s), SIGSTOP of a worker (0.5-2.5 s),
  SIGKILL of a worker (a new one starts), and a crash of a library client
  (its store closed under its Locker, leases left to expire; a new one
  starts).

## What is checked

- **No overlapping exclusive holds**: every hold is the interval from the
  acquire's return to the earlier of leaving the section and the end of
  the lease's validity as its holder knew it (library: the Locker's own
  validity, read with `+"`Lease.TTL`"+`; HTTP: send time + the granted `+"`ttlMs`"+`,
  moved on by confirmed extends; workers: acquire call + TTL − the
  library's drift margin, TTL/100 + 2 ms). Both ends
  are conservative, so an overlap means the store granted a name while
  another holder's lease was valid, not that a paused holder overran. Two
  holds of one name by different holders conflict unless both are readers
  or both semaphore permits; permits may not exceed the limit at any point.
- **Fences**: no two exclusive grants of a name share a fence, and a grant
  asked for after another returned has a higher fence (not lower, for a
  reader or a permit).
- **Fenced register**: stale writes accepted (a fence below the highest the
  cell has seen; the cell refuses them, so this must be 0), stale writes
  refused (the faults at work), and lost updates (accepted increments
  missing from the final values): 0 unless two holders were given the
  same fence or fences out of order.
- **At the end**, with traffic stopped and every lease released or expired:
  no lock key is left within TTL + 10 s; the names' bookkeeping
  keys (holder sets, queues, waiter flags) carry a TTL of at most the TTL +
  1 min, and in runs of 5 minutes or more the test waits for them to go, so
  the node holds no key but the names' fence counters and fair audit
  streams (each with a TTL within the 24 h retention), and neither this process nor `+"`dlock serve`"+`
  grew beyond the bounds below, compared with the same process idle before
  the traffic (the server: with a fresh instance).

| bound | value | why |
| --- | --- | --- |
| this process, goroutines | +%d | clients closed; toxiproxy's own goroutines (it leaks link goroutines when toxics are removed) are counted apart |
| this process, file descriptors | +%d | clients closed; the register server's last keep-alive connections; toxiproxy's sockets (accepted on a proxy port or dialled to an upstream) are counted apart |
| this process, live heap after GC | +%d MiB | the checker keeps a one-minute window; one sample per step |
| dlock serve, goroutines | +%d | its Valkey client keeps a dedicated connection (3 goroutines) per concurrent blocking wait, one per HTTP client at most |
| dlock serve, file descriptors | +%d | one per such connection |
| dlock serve, heap_alloc | +%d MiB | it counts garbage too (GOGC 100) |

None of them scales with the length of the run: a leak of one goroutine,
descriptor or lease per few hundred of the run's operations exceeds them.
Each is polled for up to 15 s (goroutines end asynchronously) and judged
on a machine shared by other jobs: no figure depends on speed.

## Last run

%s: %v of faults (seed %d), %v until the traffic had stopped; the plot
goes on through the drain.

| measure | value |
| --- | --- |
| grants (library, workers, HTTP) | %d |
| acquires: granted / refused / cancelled or timed out / failed (library and HTTP) | %d / %d / %d / %d |
| leases lost or ended before release (library and HTTP) | %d |
| holds checked / with no valid time left at return / too long to check | %d / %d / %d |
| overlapping exclusive holds | %d |
| semaphore points over the limit | %d |
| fences repeated / out of order | %d / %d |
| register writes / accepted / stale accepted / stale refused | %d / %d / %d / %d |
| register reads / refused | %d / %d |
| lost updates | %d |
| faults | %d: %s |
| keys before / after (of them retained: fence counters and fair audit streams) | %d / %d (%d, longest TTL %v) |
| drained: lock keys gone within TTL + 10 s, bookkeeping keys expiring within TTL + 1 min (runs of 5 min or more: gone, only retained keys left) | %v |
| this process: goroutines before / after (toxiproxy's apart) | %d / %d (%d / %d): %s bound |
| this process: file descriptors before / after | %d / %d: %s bound |
| this process: live heap before / after | %s / %s: %s bound |
| dlock serve: goroutines fresh / after | %.0f / %.0f: %s bound |
| dlock serve: file descriptors fresh / after | %d / %d: %s bound |
| dlock serve: heap_alloc fresh / after | %s / %s: %s bound |
| dlock serve: the last instance had run for | %v |

`,
		smokeDuration, libClients, libProcs, names, permits, waitMax, renewTTL, ttl, workers, ttl, httpClients,
		gapText(r.dur, true), gapText(r.dur, false),
		libGoroutineSlack, libFDSlack, libHeapSlack>>20, srvGoroutineSlack, srvFDSlack, srvHeapSlack>>20,
		verdict, r.dur, r.seed, r.traffic.Round(time.Second),
		r.grants, r.out.granted.Load(), r.out.refused.Load(), r.out.canceled.Load(), r.out.failed.Load(), r.out.lost.Load(),
		r.holds, r.empty, r.long, r.overlaps, r.semOver, r.dups, r.order,
		r.reg.writes, r.reg.accepted, r.reg.staleAccepted, r.reg.staleRejected, r.reg.reads, r.reg.readsRejected, r.reg.lost,
		r.nfaults, r.faultSummary, r.keys0, r.keysEnd, r.fenceKeys, r.maxFencePTTL.Round(time.Second), r.drained,
		r.libG0, r.libG, r.tpG0, r.tpG, ok(r.libOK), r.libFD0, r.libFD, ok(r.libOK),
		mib(float64(r.libHeap0)), mib(float64(r.libHeap)), ok(r.libOK),
		r.srvG0, r.srvG, ok(r.srvOK), r.srvFD0, r.srvFD, ok(r.srvOK), mib(r.srvHeap0), mib(r.srvHeap), ok(r.srvOK),
		r.srvUp.Round(time.Second))
	if len(r.violations) > 0 {
		w("Violations found (first %d):\n\n", len(r.violations))
		for _, v := range r.violations {
			w("- `%s`\n", v)
		}
		w("\n")
	}
	w("![holds, faults, goroutines, heap and keys over the run](%s)\n\n", svgName)
	w("The plot: holds in their critical section and grants per second; faults (ticks, by kind); goroutines, heap and\n")
	w("file descriptors of this process and of `dlock serve` (gaps: the server paused or restarting); keys on the node.\n")
	w("Sampled every %v.\n", r.step)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func gapText(d time.Duration, lo bool) time.Duration {
	if d >= 5*time.Minute {
		if lo {
			return time.Second
		}
		return 5 * time.Second
	}
	if lo {
		return 300 * time.Millisecond
	}
	return 1200 * time.Millisecond
}

// svg draws five panels over time, one above the other.
func (r *report) svg() string {
	const (
		width  = 900
		left   = 70
		right  = 150
		panelH = 110
		gap    = 30
		top    = 30
	)
	type series struct {
		label string
		color string
		v     func(s sample, prev *sample) (float64, bool)
	}
	type panel struct {
		title  string
		series []series
	}
	rate := func(s sample, p *sample) (float64, bool) {
		if p == nil || s.t <= p.t {
			return 0, false
		}
		return float64(s.grants-p.grants) / (s.t - p.t), true
	}
	pos := func(f func(s sample) float64) func(sample, *sample) (float64, bool) {
		return func(s sample, _ *sample) (float64, bool) { v := f(s); return v, v >= 0 }
	}
	panels := []panel{
		{"holds and grants/s", []series{
			{"holds now", "#1f77b4", pos(func(s sample) float64 { return float64(s.holds) })},
			{"grants/s", "#aec7e8", rate},
		}},
		{"goroutines", []series{
			{"this process", "#2ca02c", pos(func(s sample) float64 { return float64(s.libG) })},
			{"dlock serve", "#d62728", pos(func(s sample) float64 { return float64(s.srvG) })},
		}},
		{"heap (MiB)", []series{
			{"this process", "#2ca02c", pos(func(s sample) float64 { return s.libHeap })},
			{"dlock serve", "#d62728", func(s sample, _ *sample) (float64, bool) { return s.srvHeap, s.srvG >= 0 }},
		}},
		{"file descriptors", []series{
			{"this process", "#2ca02c", pos(func(s sample) float64 { return float64(s.libFD) })},
			{"dlock serve", "#d62728", pos(func(s sample) float64 { return float64(s.srvFD) })},
		}},
		{"keys on the node", []series{
			{"keys", "#9467bd", pos(func(s sample) float64 { return float64(s.keys) })},
		}},
	}
	height := top + len(panels)*(panelH+gap) + 40
	plotW := width - left - right
	tmax := r.traffic.Seconds()
	for _, s := range r.samples {
		tmax = max(tmax, s.t)
	}
	if tmax <= 0 {
		tmax = 1
	}
	x := func(t float64) float64 { return left + t/tmax*float64(plotW) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13">%s</text>`+"\n", left, html.EscapeString(fmt.Sprintf("dlock soak: %v, seed %d, %d faults, %d grants", r.dur, r.seed, r.nfaults, r.grants)))
	faultColor := map[string]string{}
	palette := []string{"#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e", "#8c564b", "#9edae5", "#c5b0d5"}
	for i, k := range faultKinds {
		faultColor[k] = palette[i%len(palette)]
	}
	for i, p := range panels {
		y0 := float64(top + i*(panelH+gap))
		vmax := 0.0
		var prev *sample
		for _, s := range r.samples {
			for _, se := range p.series {
				if v, ok := se.v(s, prev); ok {
					vmax = max(vmax, v)
				}
			}
			s := s
			prev = &s
		}
		if vmax <= 0 {
			vmax = 1
		}
		vmax *= 1.1
		y := func(v float64) float64 { return y0 + panelH - v/vmax*panelH }
		fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%d" height="%d" fill="none" stroke="#ccc"/>`+"\n", left, y0, plotW, panelH)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f">%s</text>`+"\n", left, y0-4, html.EscapeString(p.title))
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%s</text>`+"\n", left-4, y0+10, fmtNum(vmax))
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">0</text>`+"\n", left-4, y0+panelH)
		for j, se := range p.series {
			var pts []string
			prev = nil
			flush := func() {
				if len(pts) > 1 {
					fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.2" points="%s"/>`+"\n", se.color, strings.Join(pts, " "))
				}
				pts = pts[:0]
			}
			for _, s := range r.samples {
				if v, ok := se.v(s, prev); ok {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.t), y(v)))
				} else if prev != nil {
					flush()
				}
				s := s
				prev = &s
			}
			flush()
			fmt.Fprintf(&b, `<text x="%d" y="%.0f" fill="%s">%s</text>`+"\n", width-right+8, y0+14+float64(j)*14, se.color, html.EscapeString(se.label))
		}
	}
	// Fault ticks along the first panel's bottom, by kind.
	if len(r.samples) > 0 && len(r.faults) > 0 {
		y0 := float64(top + panelH)
		for _, f := range r.faults {
			fx := x(float64(f.t-r.t0) / 1e9)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`+"\n", fx, y0-12, fx, y0, faultColor[f.kind])
		}
		yl := float64(top+len(panels)*(panelH+gap)) + 4
		for i, k := range faultKinds {
			fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="8" height="8" fill="%s"/><text x="%d" y="%.0f">%s</text>`+"\n",
				left+(i%4)*190, yl+float64(i/4)*14, faultColor[k], left+(i%4)*190+12, yl+float64(i/4)*14+8, k)
		}
	}
	y := top + len(panels)*(panelH+gap) - gap + 14
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", left+plotW/2, y, "seconds since start")
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%.0f</text>`+"\n", left+plotW, y, tmax)
	b.WriteString("</svg>\n")
	return b.String()
}

func fmtNum(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
