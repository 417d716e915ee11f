package valkey_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// BenchmarkServerCPU measures the server's CPU per uncontended acquire +
// release, with the client's round trips out of the way: the commands go
// in batches of 100 (100 acquires, then their 100 releases), so the
// server's per-op cost is the scripts' and commands' own, not the network's.
//
//	raw        SET NX PX, then a compare-and-delete script (GET, DEL)
//	setscript  as raw, but the SET NX PX inside a script: the floor of any
//	           acquire that is a script, before a fence
//	fenced     as raw, but the acquire a script that also issues a fence
//	           with dlock's guarantees (redisproto.LeastFencedAcquire): the
//	           floor of a fenced acquire
//	fenced-slot as fenced, but one mark per hash slot (Layout.Mark, as
//	           dlock's), not one per server
//	hwm        as fenced, but the fence from one mark per server, not a
//	           counter per name (redisproto.LeastHWMAcquire): a design
//	           dlock does not use, measured for what it would save
//	fresh      the mutex scripts on a new name per op: the clock path
//	same       the mutex scripts on 100 names taken again and again: INCR
//	fresh-full as fresh, but every release in the script's full form, as
//	           for a name with waiters (Layout.Contend): what the short
//	           form of a release without waiters saves (docs/design.md)
//
// A dlock kind ending in "-evalsha" sends the mutex's scripts by EVALSHA
// instead of FCALL, as before they were functions.
//
// server-µs/op is the figure; ns/op includes the client.
func BenchmarkServerCPU(b *testing.B) {
	for _, kind := range []string{"raw", "setscript", "fenced", "hwm", "fresh", "fresh-full", "same"} {
		b.Run(kind, func(b *testing.B) { benchServerCPU(b, kind) })
	}
}

func benchServerCPU(b *testing.B, kind string) {
	srv, round := serverCPUKind(b, kind)
	b.ResetTimer()
	cpu := startCPU(b, srv)
	n := 0
	for n < b.N {
		round(serverCPUBatch + n)
		n += serverCPUBatch
	}
	b.StopTimer()
	cpu.reportN(b, n)
}

// BenchmarkServerCPUHolder measures what a hold's record costs the server
// (issue 38): dlock's mutex on new names and on names taken again, each
// without a record and with a Holder set (the record's key and the waiters
// flag written with the grant, and the release in the record's short form,
// which reads and deletes them), side by side as in BenchmarkServerCPUSideBySide.
// It reports each one's server CPU per acquire+release and the ratios with
// a Holder over without.
func BenchmarkServerCPUHolder(b *testing.B) {
	kinds := []string{"fresh", "fresh-holder", "same", "same-holder"}
	cpu, n := sideBySide(b, kinds)
	per := func(i int) float64 { return float64(cpu[i].Microseconds()) / float64(n) }
	for i, k := range kinds {
		b.ReportMetric(per(i), k+"-server-µs/op")
	}
	b.ReportMetric(per(1)/per(0), "fresh-holder/fresh")
	b.ReportMetric(per(3)/per(2), "same-holder/same")
}

// BenchmarkServerCPUBefore38 measures the mutex's fast path (no record)
// against the acquire script as it was before issue 38's records
// (testdata/mutex_acquire_before38.lua), side by side, on new names and on
// names taken again: the records must cost a request without one nothing
// on the server.
func BenchmarkServerCPUBefore38(b *testing.B) {
	kinds := []string{"fresh-before38", "fresh", "same-before38", "same"}
	cpu, n := sideBySide(b, kinds)
	per := func(i int) float64 { return float64(cpu[i].Microseconds()) / float64(n) }
	for i, k := range kinds {
		b.ReportMetric(per(i), k+"-server-µs/op")
	}
	b.ReportMetric(per(1)/per(0), "fresh/before38")
	b.ReportMetric(per(3)/per(2), "same/before38")
}

// sideBySide runs the kinds' batches in turn, each on a server of its own,
// and returns each one's server CPU and the number of acquire+release.
func sideBySide(b *testing.B, kinds []string) ([]time.Duration, int) {
	srvs := make([]*testredis.Server, len(kinds))
	rounds := make([]func(int), len(kinds))
	for i, k := range kinds {
		srvs[i], rounds[i] = serverCPUKind(b, k)
	}
	cpu := make([]time.Duration, len(kinds))
	b.ResetTimer()
	n := 0
	for n < b.N {
		for j := range kinds {
			i := (j + n/serverCPUBatch) % len(kinds) // each goes first in turn
			before := serverCPU(b, srvs[i])
			rounds[i](serverCPUBatch + n)
			cpu[i] += serverCPU(b, srvs[i]) - before
		}
		n += serverCPUBatch
	}
	b.StopTimer()
	return cpu, n
}

// BenchmarkServerCPUSideBySide measures the least fenced lock ("fenced")
// and dlock's mutex on new names ("fresh") and on names taken again
// ("same") side by side: each on a server of its own, their batches sent
// in turn, so that a machine loaded by other work weighs on all alike. It
// reports each one's server CPU per acquire+release and its ratio to the
// least fenced lock's (issue 41; docs/benchmarks.md). Two diagnostics
// beside them: "fresh-evalsha", dlock's mutex by EVALSHA as before its
// scripts were functions, and "fenced-slot", the least fenced lock with
// one mark per hash slot (as dlock keeps them, so that one script serves a
// cluster) instead of one per server: on new names each op then touches
// one of 16384 marks, which costs the server CPU that no instruction count
// shows.
func BenchmarkServerCPUSideBySide(b *testing.B) {
	kinds := []string{"fenced", "fresh", "same", "fresh-evalsha", "fenced-slot"}
	cpu, n := sideBySide(b, kinds)
	per := func(i int) float64 { return float64(cpu[i].Microseconds()) / float64(n) }
	for i, k := range kinds {
		b.ReportMetric(per(i), k+"-server-µs/op")
		if i > 0 {
			b.ReportMetric(per(i)/per(0), k+"/fenced")
		}
	}
}

// BenchmarkServerInstructions counts the server's instructions per
// uncontended acquire+release, as BenchmarkServerCPUSideBySide measures its
// CPU: the least fenced lock ("fenced"), and dlock's mutex on new names
// ("fresh") and on names taken again ("same"), each on a redis-server of
// its own run by callgrind (testredis.WithCallgrind). CPU time on a shared
// machine moved by ±30 % between runs here; the count moves by under 1 %
// whatever else the machine does, so it tells a change to a script from
// noise in one run (issue 41; docs/benchmarks.md):
//
//	go test -run '^$' -bench ServerInstructions -benchtime 1000x ./store/valkey/
//
// It reports each one's instructions per acquire+release and dlock's over
// the least fenced lock's. It needs valgrind (skipped without it).
func BenchmarkServerInstructions(b *testing.B) {
	kinds := []string{"fenced", "fresh", "same", "fresh-evalsha", "same-evalsha"}
	per := make([]float64, len(kinds))
	for i, k := range kinds {
		srv, round := serverCPUKind(b, k, testredis.WithCallgrind())
		// What the start and the warm-up took.
		if _, err := srv.Instructions(); err != nil {
			b.Fatal(err)
		}
		n := 0
		for n < b.N {
			round(serverCPUBatch + n)
			n += serverCPUBatch
		}
		ins, err := srv.Instructions()
		if err != nil {
			b.Fatal(err)
		}
		per[i] = float64(ins) / float64(n)
	}
	for i, k := range kinds {
		b.ReportMetric(per[i], k+"-instr/op")
	}
	b.ReportMetric(per[1]/per[0], "fresh/fenced")
	b.ReportMetric(per[2]/per[0], "same/fenced")
	b.ReportMetric(per[3]/per[0], "fresh-evalsha/fenced")
	b.ReportMetric(per[4]/per[0], "same-evalsha/fenced")
}

// serverCPUBatch is how many acquires, then releases, BenchmarkServerCPU
// sends in one batch.
const serverCPUBatch = 100

// serverCPUKind starts a server for kind (see BenchmarkServerCPU), and
// returns it and round, which sends serverCPUBatch acquires and then their
// releases, on names from first on; both rounds of the warm-up are done.
func serverCPUKind(b *testing.B, kind string, opts ...testredis.Option) (*testredis.Server, func(first int)) {
	srv := testredis.Start(b, opts...)
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	ops, err := redisproto.ModeOps(store.ModeMutex, "valkey")
	if err != nil {
		b.Fatal(err)
	}
	l := redisproto.NewLayout("lock:", 24*time.Hour)
	const rawRelease = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`
	ctx := b.Context()
	load := func(src string) string {
		sha, err := c.Do(ctx, c.B().ScriptLoad().Script(src).Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		return sha
	}
	// The mutex's calls go as the Store sends them: by FCALL, the scripts
	// that have a function form, unless kind ends in "-evalsha".
	byEvalsha := strings.HasSuffix(kind, "-evalsha")
	kind = strings.TrimSuffix(kind, "-evalsha")
	for _, sc := range []*redisproto.Script{ops.Acquire, ops.ShortRelease} {
		if fn := sc.Function(); fn != nil && !byEvalsha {
			if err := c.Do(ctx, c.B().FunctionLoad().FunctionCode(fn.Lib).Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
	}
	acq, rel, shortRel, rawRel := load(ops.Acquire.Src), load(ops.Release.Src), load(ops.ShortRelease.Src), load(rawRelease)
	fullAcq, recRel := load(ops.FullAcquire.Src), load(ops.RecordRelease.Src)
	if strings.HasSuffix(kind, "-before38") {
		src, err := os.ReadFile("testdata/mutex_acquire_before38.lua")
		if err != nil {
			b.Fatal(err)
		}
		acq, kind = load(string(src)), strings.TrimSuffix(kind, "-before38")
	}
	setScript := load(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`)
	fencedScript := load(redisproto.LeastFencedAcquire.Src)
	hwmScript := load(redisproto.LeastHWMAcquire.Src)
	evalsha := func(sha string, keys, args []string) vk.Completed {
		return c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	// as sends sc (loaded as sha) the way the Store does.
	as := func(sc *redisproto.Script, sha string, keys, args []string) vk.Completed {
		if fn := sc.Function(); fn != nil && !byEvalsha {
			return c.B().Fcall().Function(fn.Name).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		}
		return evalsha(sha, keys, args)
	}
	round := func(first int) {
		var acqs, rels vk.Commands
		for j := range serverCPUBatch {
			name := "n" + strconv.Itoa(first+j)
			if kind == "same" || kind == "same-holder" {
				name = "n" + strconv.Itoa(j)
			}
			switch kind {
			case "raw":
				acqs = append(acqs, c.B().Set().Key(l.Key(name)).Value("token").Nx().PxMilliseconds(30000).Build())
			case "setscript":
				acqs = append(acqs, evalsha(setScript, []string{l.Key(name)}, []string{"token", "30000"}))
			case "fenced":
				acqs = append(acqs, evalsha(fencedScript, []string{l.Key(name), l.Key(name) + ":f", "lock:fenced-mark"}, []string{"token", "30000", "90000"}))
			case "fenced-slot":
				acqs = append(acqs, evalsha(fencedScript, []string{l.Key(name), l.Key(name) + ":f", l.Mark(name) + "-s"}, []string{"token", "30000", "90000"}))
			case "hwm":
				acqs = append(acqs, evalsha(hwmScript, []string{l.Key(name), "lock:fence-mark"}, []string{"token", "30000"}))
			}
			if kind == "raw" || kind == "setscript" || kind == "fenced" || kind == "fenced-slot" || kind == "hwm" {
				rels = append(rels, evalsha(rawRel, []string{l.Key(name)}, []string{"token"}))
				continue
			}
			req := store.Request{Name: name, Token: "token", TTL: 30 * time.Second, Mode: store.ModeMutex}
			holder := kind == "fresh-holder" || kind == "same-holder"
			if holder {
				req.Holder = "host.example/12345" // as dlock.DefaultHolder makes it
			}
			sc, sha := ops.Acquire, acq
			if ops.AcquireScript(req) == ops.FullAcquire {
				sc, sha = ops.FullAcquire, fullAcq
			}
			acqs = append(acqs, as(sc, sha, ops.AcquireKeys(l, req), ops.AcquireArgs(ctx, l, req)))
			if kind == "fresh-full" {
				l.Contend(name) // the release's full form
			}
			if holder {
				l.Record(name) // as the Store's Acquire does: the record's short form
			}
			rk, ra, short, recorded := ops.ReleaseCall(l, req)
			if short == (kind == "fresh-full") || recorded != holder {
				b.Fatalf("%s: release short form %v, record's %v", kind, short, recorded)
			}
			switch {
			case recorded:
				rels = append(rels, evalsha(recRel, rk, ra))
			case short:
				rels = append(rels, as(ops.ShortRelease, shortRel, rk, ra))
			default:
				rels = append(rels, evalsha(rel, rk, ra))
			}
		}
		check := func(rs []vk.ValkeyResult) {
			for _, r := range rs {
				if err := r.Error(); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, r := range c.DoMulti(ctx, acqs...) {
			if kind == "fenced" || kind == "fenced-slot" || kind == "hwm" {
				if _, err := r.ToInt64(); err != nil {
					b.Fatalf("fenced acquire: %v", err)
				}
			} else if kind == "raw" || kind == "setscript" {
				if ok, err := r.ToString(); err != nil || ok != "OK" {
					b.Fatalf("SET NX = %q, %v", ok, err)
				}
			} else if g, err := r.AsInt64(); err != nil || g < 1 {
				b.Fatalf("acquire = %v, %v", g, err)
			}
		}
		check(c.DoMulti(ctx, rels...))
	}
	// Warm up: scripts loaded, and for "same" every name's counter created
	// and known to the Layout.
	round(0)
	round(0)
	return srv, round
}
