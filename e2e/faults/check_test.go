package faults

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

// grant is one successful acquire, with what its holder did under it.
type grant struct {
	W, Iter    int
	Mode       string
	Fence      int64
	Invoke     int64 // acquire call began
	Acquired   int64 // acquire call returned the grant
	Enter      int64
	Exit       int64 // math.MaxInt64 when the holder never left (killed)
	Lost       int64 // 0 when the lease was not lost
	Release    int64
	ReleaseErr string
}

func (g grant) exclusive() bool { return g.Mode != "read" }

type key struct{ w, iter int }

// grants assembles the grants of a history.
func grants(evs []wire.Event) []grant {
	idx := map[key]*grant{}
	var order []key
	invokes := map[key]int64{}
	for _, ev := range evs {
		k := key{ev.W, ev.Iter}
		switch ev.Kind {
		case wire.KindInvoke:
			invokes[k] = ev.T
		case wire.KindAcquire:
			idx[k] = &grant{W: ev.W, Iter: ev.Iter, Mode: ev.Mode, Fence: ev.Fence, Invoke: invokes[k], Acquired: ev.T, Exit: math.MaxInt64}
			order = append(order, k)
		}
	}
	for _, ev := range evs {
		g := idx[key{ev.W, ev.Iter}]
		if g == nil {
			continue
		}
		switch ev.Kind {
		case wire.KindEnter:
			g.Enter = ev.T
		case wire.KindExit:
			g.Exit = ev.T
		case wire.KindLost:
			g.Lost = ev.T
		case wire.KindRelease:
			g.Release, g.ReleaseErr = ev.T, ev.Err
		}
	}
	out := make([]grant, 0, len(order))
	for _, k := range order {
		out = append(out, *idx[k])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Acquired < out[j].Acquired })
	return out
}

// overlaps counts pairs of critical sections of different workers that
// overlap in time where at least one is exclusive. Exact: every process
// reads the same CLOCK_MONOTONIC.
func overlaps(gs []grant) int {
	n := 0
	for i := range gs {
		for j := i + 1; j < len(gs); j++ {
			a, b := gs[i], gs[j]
			if a.W == b.W || (!a.exclusive() && !b.exclusive()) {
				continue
			}
			if a.Enter < b.Exit && b.Enter < a.Exit {
				n++
			}
		}
	}
	return n
}

// fenceViolations counts exclusive grants whose fence repeats an earlier
// grant's, and pairs where a grant that returned before another was even
// asked for has a fence not lower than the later one's.
func fenceViolations(gs []grant) (dups, order int) {
	seen := map[int64]bool{}
	var ex []grant
	for _, g := range gs {
		if !g.exclusive() {
			continue
		}
		if seen[g.Fence] {
			dups++
		}
		seen[g.Fence] = true
		ex = append(ex, g)
	}
	for i := range ex {
		for j := range ex {
			if ex[i].Acquired < ex[j].Invoke && ex[i].Fence >= ex[j].Fence {
				order++
			}
		}
	}
	return dups, order
}

// regStats summarises the register's own record.
type regStats struct {
	reads, writes, accepted, staleAccepted, staleRejected int
	final                                                 int64
}

func registerStats(r *register) regStats {
	ops, val := r.snapshot()
	s := regStats{final: val}
	for _, op := range ops {
		if !op.Write {
			s.reads++
			continue
		}
		s.writes++
		if op.Accepted {
			s.accepted++
		}
		switch {
		case op.Stale && op.Accepted:
			s.staleAccepted++
		case op.Stale:
			s.staleRejected++
		}
	}
	return s
}

// lostUpdates is the read-sleep-write counter's loss: accepted increments
// that the final value does not show. It is -1 for a run that wrote
// without reading (no counter).
func (s regStats) lostUpdates() (int, float64) {
	if s.reads == 0 {
		return -1, 0
	}
	lost := s.accepted - int(s.final)
	if s.accepted == 0 {
		return lost, 0
	}
	return lost, float64(lost) / float64(s.accepted)
}

// Porcupine model of the fenced register.

type regIn struct {
	Write bool
	Fence int64
	Val   int64
}

type regOut struct {
	OK      bool
	Val     int64
	Unknown bool // no reply: the operation may or may not have happened
}

type regState struct{ Max, Val int64 }

func registerModel(fenced bool) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []any { return []any{regState{}} },
		Step: func(state, input, output any) []any {
			st, in, out := state.(regState), input.(regIn), output.(regOut)
			acc := !fenced || in.Fence >= st.Max
			next := st
			if acc {
				next.Max = max(st.Max, in.Fence)
				if in.Write {
					next.Val = in.Val
				}
			}
			if out.Unknown {
				if next == st {
					return []any{st}
				}
				return []any{st, next}
			}
			if out.OK != acc {
				return nil
			}
			if acc && !in.Write && out.Val != st.Val {
				return nil
			}
			return []any{next}
		},
		Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
		DescribeOperation: func(input, output any) string {
			in, out := input.(regIn), output.(regOut)
			op := fmt.Sprintf("read(fence %d)", in.Fence)
			if in.Write {
				op = fmt.Sprintf("write(fence %d, %d)", in.Fence, in.Val)
			}
			if out.Unknown {
				return op + " -> ?"
			}
			return fmt.Sprintf("%s -> ok=%v val=%d", op, out.OK, out.Val)
		},
	}
}

// registerHistory turns the workers' register calls into porcupine
// operations; a call without a reply returns at "infinity".
func registerHistory(evs []wire.Event) []porcupine.Operation {
	type pend struct {
		call int64
		in   regIn
	}
	open := map[key]*pend{}
	var ops []porcupine.Operation
	for _, ev := range evs {
		k := key{ev.W, ev.Iter}
		switch ev.Kind {
		case wire.KindReadCall:
			open[k] = &pend{ev.T, regIn{Fence: ev.Fence}}
		case wire.KindWriteCall:
			open[k] = &pend{ev.T, regIn{Write: true, Fence: ev.Fence, Val: ev.Val}}
		case wire.KindRead, wire.KindWrite:
			p := open[k]
			if p == nil {
				continue
			}
			delete(open, k)
			out := regOut{OK: ev.Accepted, Val: ev.Val, Unknown: ev.Err != ""}
			ret := ev.T
			if out.Unknown {
				ret = math.MaxInt64 / 2
			}
			ops = append(ops, porcupine.Operation{ClientId: ev.W, Input: p.in, Call: p.call, Output: out, Return: ret})
		}
	}
	for k, p := range open {
		ops = append(ops, porcupine.Operation{ClientId: k.w, Input: p.in, Call: p.call, Output: regOut{Unknown: true}, Return: math.MaxInt64 / 2})
	}
	return ops
}

// checkRegister runs porcupine on the register history; a timeout is
// "Unknown", which callers must treat as inconclusive, never as a pass.
func checkRegister(evs []wire.Event, fenced bool) porcupine.CheckResult {
	ops := registerHistory(evs)
	if len(ops) == 0 {
		return porcupine.Ok
	}
	m := registerModel(fenced)
	return porcupine.CheckOperationsTimeout(m.ToModel(), ops, 30*time.Second)
}

// Porcupine model of the mutex itself (gating only on fault-free runs,
// where no lease can expire under its holder).

type mutexIn struct {
	Acquire bool
	Client  int
}

type mutexOut struct {
	OK    bool
	Fence int64
}

type mutexState struct {
	Owner    int // -1 when free
	MaxFence int64
}

var mutexModel = porcupine.Model{
	Init: func() any { return mutexState{Owner: -1} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(mutexState), input.(mutexIn), output.(mutexOut)
		if in.Acquire {
			if !out.OK {
				return st.Owner != -1, st
			}
			if st.Owner != -1 || out.Fence <= st.MaxFence {
				return false, st
			}
			return true, mutexState{Owner: in.Client, MaxFence: out.Fence}
		}
		if st.Owner != in.Client {
			return false, st
		}
		return true, mutexState{Owner: -1, MaxFence: st.MaxFence}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(mutexIn), output.(mutexOut)
		if in.Acquire {
			return fmt.Sprintf("w%d acquire -> %v fence %d", in.Client, out.OK, out.Fence)
		}
		return fmt.Sprintf("w%d release", in.Client)
	},
}

// checkMutex runs porcupine's mutex model over the grants (acquire from
// invoke to grant, release from leaving the section to Release returning).
func checkMutex(gs []grant) porcupine.CheckResult {
	var ops []porcupine.Operation
	for _, g := range gs {
		ops = append(ops, porcupine.Operation{ClientId: g.W, Input: mutexIn{Acquire: true, Client: g.W},
			Call: g.Invoke, Output: mutexOut{OK: true, Fence: g.Fence}, Return: g.Acquired})
		if g.Release != 0 && g.ReleaseErr == "" {
			ops = append(ops, porcupine.Operation{ClientId: g.W, Input: mutexIn{Client: g.W},
				Call: g.Exit, Output: mutexOut{OK: true}, Return: g.Release})
		}
	}
	return porcupine.CheckOperationsTimeout(mutexModel, ops, 30*time.Second)
}
