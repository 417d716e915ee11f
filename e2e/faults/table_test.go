package faults

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/anishathalye/porcupine"
)

// result is one scenario run's row in the results table.
type result struct {
	Scenario      string
	Faults        string
	Fenced        bool
	Grants        int
	Overlaps      int
	Promise       string // "none promised" (overlaps of valid leases must be 0) or "not promised" (counted, shown); empty before T26
	StaleAccepted int
	StaleRejected int
	Lost          int // read-sleep-write increments lost
	LostFrac      float64
	FenceDups     int
	FenceOrder    int
	Register      porcupine.CheckResult // porcupine on the register history
	Extra         string                // scenario-specific figures
	Verdict       string
}

var (
	tableMu sync.Mutex
	table   []result
)

// measure runs every checker over the env's history.
func (e *env) measure() result {
	evs := e.history()
	gs := grants(evs)
	rs := registerStats(e.reg)
	lost, frac := rs.lostUpdates()
	dups, order := fenceViolations(gs)
	return result{
		Scenario:      e.t.Name(),
		Faults:        strings.Join(e.faults, "; "),
		Fenced:        e.reg.fenced,
		Grants:        len(gs),
		Overlaps:      overlaps(gs),
		StaleAccepted: rs.staleAccepted,
		StaleRejected: rs.staleRejected,
		Lost:          lost,
		LostFrac:      frac,
		FenceDups:     dups,
		FenceOrder:    order,
		Register:      checkRegister(evs, e.reg.fenced),
	}
}

// record adds r to the table, with the verdict the test reached.
func (e *env) record(r result) {
	r.Verdict = "pass"
	if e.t.Failed() {
		r.Verdict = "FAIL"
	}
	e.t.Logf("result: grants=%d overlaps=%d stale-accepted=%d stale-rejected=%d lost=%d (%.0f%%) fence-dups=%d fence-order=%d register=%s %s",
		r.Grants, r.Overlaps, r.StaleAccepted, r.StaleRejected, r.Lost, 100*r.LostFrac, r.FenceDups, r.FenceOrder, r.Register, r.Extra)
	tableMu.Lock()
	table = append(table, r)
	tableMu.Unlock()
	if os.Getenv("FAULTS_DUMP") != "" {
		evs := e.history()
		sort.Slice(evs, func(i, j int) bool { return evs[i].T < evs[j].T })
		for _, ev := range evs {
			e.t.Logf("%8.3fs w%d %-10s i=%d fence=%d val=%d ok=%v %s %s %s", float64(ev.T-evs[0].T)/1e9, ev.W, ev.Kind, ev.Iter, ev.Fence, ev.Val, ev.Accepted, ev.Result, ev.Op, ev.Err)
		}
	}
}

// scenarioID returns the number of a scenario name's T-ID ("T17_rw..." is
// 17), for sorting the table.
func scenarioID(name string) int {
	i := strings.Index(name, "/T")
	if i < 0 {
		return 1 << 30
	}
	n := 0
	for _, c := range name[i+2:] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// shortName drops the top-level test's name from a scenario's name.
func shortName(name string) string {
	if i := strings.Index(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}

// printTable prints the results table of the run, by scenario ID; as a
// Markdown table when markdown is set.
func printTable(w io.Writer, markdown bool) {
	tableMu.Lock()
	defer tableMu.Unlock()
	if len(table) == 0 {
		return
	}
	rows := append([]result(nil), table...)
	sort.SliceStable(rows, func(i, j int) bool { return scenarioID(rows[i].Scenario) < scenarioID(rows[j].Scenario) })
	header := []string{"scenario", "fenced", "grants", "overlaps", "stale accepted", "stale rejected", "lost updates", "fence dup/order", "register", "verdict", "faults; notes"}
	var tw *tabwriter.Writer
	if markdown {
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat(" --- |", len(header)))
	} else {
		fmt.Fprintln(w, "\nfault-injection results:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for _, r := range rows {
		fenced := "no"
		if r.Fenced {
			fenced = "yes"
		}
		lost := "-"
		if r.Lost >= 0 {
			lost = fmt.Sprintf("%d (%.0f%%)", r.Lost, 100*r.LostFrac)
		}
		note := r.Faults
		if note == "" {
			note = "none"
		}
		if r.Extra != "" {
			note += "; " + r.Extra
		}
		overlaps := fmt.Sprint(r.Overlaps)
		if r.Promise != "" {
			overlaps += " (" + r.Promise + ")"
		}
		cells := []string{shortName(r.Scenario), fenced, fmt.Sprint(r.Grants), overlaps, fmt.Sprint(r.StaleAccepted),
			fmt.Sprint(r.StaleRejected), lost, fmt.Sprintf("%d/%d", r.FenceDups, r.FenceOrder), string(r.Register), r.Verdict, note}
		if markdown {
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		} else {
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
	}
	if tw != nil {
		tw.Flush()
	}
}
