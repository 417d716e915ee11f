package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

var statusCmd = &command{
	name:     "status",
	synopsis: "[flags] NAME",
	summary:  "show a lock's state: free or held, its holders' owners and ages, mode, time left, fence, queue",
	argNames: []string{"NAME"},
	minpos:   1,
	help: `
Show the state of lock NAME on a shared store: whether it is held, by how
many holders, in which mode, for how much longer, its last fencing token and
how many waiters are queued; then one line per hold: its owner (as the
holder recorded it: dlock run --owner, the HTTP API's owner, the library's
WithHolder), how long it has been held, and its data. A hold recorded without
an owner (or a foreign library's key) shows as owner unknown. Tokens are
never shown. Exits 0 whether the lock is held or free.

Examples:
  dlock status --redis-url redis://127.0.0.1:6379 nightly
  dlock status --server http://locks:3009 --json deploy`,
}

var listCmd = &command{
	name:     "list",
	synopsis: "[flags]",
	summary:  "list the locks currently held or queued on a store",
	help: `
List the locks currently held or waited for on a shared store, one line each,
sorted by name, with the owner of the longest-held hold ("+N" more holders)
and how long it has been held ("-" when unknown). Tokens are never shown.

Examples:
  dlock list --server http://locks:3009
  dlock list --redis-url redis://127.0.0.1:6379 --json`,
}

func init() {
	inspectFlags := func(x *cmd) any {
		x.fs.Bool(&x.json, "json", "DLOCK_JSON", "print JSON instead of text")
		x.store.register(x.fs, true)
		return nil
	}
	statusCmd.flags, statusCmd.run = inspectFlags, runStatus
	listCmd.flags, listCmd.run = inspectFlags, runList
}

// stateJSON is how status and list print a lock: the HTTP API's shape.
type stateJSON struct {
	Name    string      `json:"name"`
	Held    bool        `json:"held"`
	Mode    string      `json:"mode,omitempty"`
	Holders int         `json:"holders"`
	TTLMs   int64       `json:"ttlMs"`
	Fence   int64       `json:"fence"`
	Queue   int         `json:"queue"`
	Limit   int         `json:"limit,omitempty"`
	Owners  []ownerJSON `json:"owners"`
}

// ownerJSON is one hold of a lock, as the HTTP API shows it: its owner
// ("" unknown), its grant (unix ms, by the store's clock; absent when
// unknown), its age and data.
type ownerJSON struct {
	Owner string `json:"owner"`
	Since int64  `json:"since,omitempty"`
	AgeMs int64  `json:"ageMs"`
	Data  string `json:"data,omitempty"`
	Fence int64  `json:"fence,omitempty"`
}

// owners returns hs oldest first (unknown grants last), as JSON.
func owners(hs []store.Holder, now time.Time) []ownerJSON {
	hs = slices.Clone(hs)
	slices.SortStableFunc(hs, func(a, b store.Holder) int {
		if a.Since.IsZero() != b.Since.IsZero() {
			if a.Since.IsZero() {
				return 1
			}
			return -1
		}
		return a.Since.Compare(b.Since)
	})
	out := make([]ownerJSON, len(hs))
	for i, h := range hs {
		out[i] = ownerJSON{Owner: h.Owner, Data: h.Data, Fence: h.Fence}
		if !h.Since.IsZero() {
			out[i].Since = h.Since.UnixMilli()
			out[i].AgeMs = max(now.Sub(h.Since).Milliseconds(), 0)
		}
	}
	return out
}

func toJSON(st store.State) stateJSON {
	j := stateJSON{Name: st.Name, Held: st.Holders > 0, Holders: st.Holders, TTLMs: st.TTL.Milliseconds(),
		Fence: st.Fence, Queue: st.Queue, Limit: st.Limit, Owners: owners(st.Owners, time.Now())}
	if st.Holders > 0 || st.Queue > 0 {
		j.Mode = st.Mode.String()
	}
	return j
}

func (x *cmd) inspector(ctx context.Context) (store.Inspector, *backend, int) {
	b, code := x.openClient(ctx)
	if b == nil {
		return nil, nil, code
	}
	in, ok := b.store.(store.Inspector)
	if !ok {
		b.close()
		return nil, nil, x.fail(fmt.Errorf("dlock: the %s store cannot describe its locks: %w", b.name, dlock.ErrNotSupported))
	}
	return in, b, 0
}

func runStatus(ctx context.Context, x *cmd, pos, _ []string) int {
	name := pos[0]
	if err := dlock.ValidName(name); err != nil {
		return x.usageFail("%v", err)
	}
	in, b, code := x.inspector(ctx)
	if in == nil {
		return code
	}
	defer b.close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := in.State(ctx, name)
	if err != nil {
		return x.fail(err)
	}
	if st.Name == "" {
		st.Name = name
	}
	if x.json {
		return x.printJSON(toJSON(st))
	}
	fmt.Fprintln(x.env.Stdout, describe(st))
	for _, o := range owners(st.Owners, time.Now()) {
		fmt.Fprintln(x.env.Stdout, "  "+describeOwner(o))
	}
	return 0
}

// describeOwner is one human line about a hold.
func describeOwner(o ownerJSON) string {
	s := "owner unknown"
	if o.Owner != "" {
		s = "owner " + o.Owner
	}
	if o.Since != 0 {
		s += ", held for " + age(o.AgeMs)
	}
	if o.Fence != 0 {
		s += fmt.Sprintf(", fence %d", o.Fence)
	}
	if o.Data != "" {
		s += fmt.Sprintf(", data %q", o.Data)
	}
	return s
}

// age is a hold's age for people: to the second from 10s on.
func age(ms int64) string {
	return roundTTL(time.Duration(ms) * time.Millisecond).String()
}

// describe is one human line about a lock.
func describe(st store.State) string {
	s := st.Name + ": "
	switch {
	case st.Holders == 0:
		s += "free"
	case st.Holders == 1:
		s += fmt.Sprintf("held (%s), %s", st.Mode, timeLeft(st.TTL))
	default:
		s += fmt.Sprintf("held by %d (%s), %s", st.Holders, st.Mode, timeLeft(st.TTL))
	}
	if st.Limit > 0 {
		s += fmt.Sprintf(", limit %d", st.Limit)
	}
	if st.Queue > 0 {
		s += fmt.Sprintf(", %d waiting", st.Queue)
	}
	if st.Fence > 0 {
		s += fmt.Sprintf(", fence %d", st.Fence)
	}
	return s
}

// timeLeft says how long a held lock has left. A hold without a TTL is a
// key set without an expiry (by hand or by another program): it never
// expires, and stays until someone deletes it.
func timeLeft(ttl time.Duration) string {
	if ttl <= 0 {
		return "never expires (the key has no TTL)"
	}
	return fmt.Sprintf("%v left", roundTTL(ttl))
}

func roundTTL(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

func runList(ctx context.Context, x *cmd, _, _ []string) int {
	in, b, code := x.inspector(ctx)
	if in == nil {
		return code
	}
	defer b.close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	states, err := in.List(ctx)
	if err != nil {
		return x.fail(err)
	}
	sort.Slice(states, func(i, j int) bool { return states[i].Name < states[j].Name })
	if x.json {
		out := make([]stateJSON, len(states))
		for i, st := range states {
			out[i] = toJSON(st)
		}
		return x.printJSON(out)
	}
	if len(states) == 0 {
		fmt.Fprintln(x.env.Stdout, "no locks held")
		return 0
	}
	writeTable(x.env.Stdout, states)
	return 0
}

func writeTable(w io.Writer, states []store.State) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tHOLDERS\tTTL\tQUEUE\tFENCE\tOWNER\tAGE")
	now := time.Now()
	for _, st := range states {
		mode := st.Mode.String()
		if st.Limit > 0 {
			mode += fmt.Sprintf("/%d", st.Limit)
		}
		ttl := roundTTL(st.TTL).String()
		if st.Holders > 0 && st.TTL <= 0 {
			ttl = "never"
		}
		owner, held := ownerColumns(owners(st.Owners, now))
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", st.Name, mode, st.Holders, ttl, st.Queue, st.Fence, owner, held)
	}
	tw.Flush()
}

// ownerColumns are the OWNER and AGE of list's table: the longest-held
// hold's owner ("+N" more holders) and age, "-" for what is unknown or
// for nobody.
func ownerColumns(holds []ownerJSON) (owner, held string) {
	if len(holds) == 0 {
		return "-", "-"
	}
	owner, held = holds[0].Owner, "-"
	if owner == "" {
		owner = "-"
	}
	if strings.ContainsAny(owner, " \t") {
		owner = strconv.Quote(owner)
	}
	if len(holds) > 1 {
		owner += fmt.Sprintf(" +%d", len(holds)-1)
	}
	if holds[0].Since != 0 {
		held = age(holds[0].AgeMs)
	}
	return owner, held
}

func (x *cmd) printJSON(v any) int {
	enc := json.NewEncoder(x.env.Stdout)
	if err := enc.Encode(v); err != nil {
		return x.fail(err)
	}
	return 0
}
