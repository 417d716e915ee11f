package main

// W3-procs: W3 with every client in its own OS process. The driver (or the
// test binary) re-executes itself with workerEnv set; see workerMain.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// workerEnv, when set (to the JSON of a workerArgs), makes the process a
// W3-procs worker instead of the driver or the tests.
const workerEnv = "DLOCK_BENCH_W3_WORKER"

const (
	// procsStartup bounds how long the workers may take to start and open
	// their lockers.
	procsStartup = 15 * time.Second
	// procsGrace is how long a worker may take after the window to finish
	// its last Lock, close its locker and report.
	procsGrace = 5 * time.Second
)

// workerArgs is what the driver tells a worker.
type workerArgs struct {
	Contender string        `json:"contender"`
	Addrs     []string      `json:"addrs"`
	Name      string        `json:"name"` // the lock
	Hold      time.Duration `json:"hold"`
	// Deadline (UnixNano) is when the worker stops on its own, even if the
	// driver never tells it to; it exits at the latest a moment later.
	Deadline int64 `json:"deadline"`
}

// lockRecord is one Lock call of a worker, in wall-clock UnixNano (the
// only clock the processes share).
type lockRecord struct {
	Call    int64  `json:"c"`           // Lock called
	Return  int64  `json:"g"`           // Lock returned: the grant, if Err is empty
	Release int64  `json:"r,omitempty"` // release called (after the hold); 0 if Lock failed
	Unlock  int64  `json:"u,omitempty"` // release returned; 0 if Lock or the release failed
	Err     string `json:"e,omitempty"`
}

// workerResult is what a worker writes to stdout when it is done.
type workerResult struct {
	Records []lockRecord `json:"records"`
	// Errors counts the failed Lock calls (those that did not fail because
	// the worker was stopping) and failed releases, as contention does.
	Errors   int64  `json:"errors"`
	FirstErr string `json:"first_error,omitempty"`
}

func workerMode() bool { return os.Getenv(workerEnv) != "" }

// contenderByName finds a contender of the driver by name.
func contenderByName(name string) (contender, bool) {
	all := append(append(append(oneNode(), diagnostics()...), fairContender()), fiveNodes()...)
	i := slices.IndexFunc(all, func(c contender) bool { return c.name == name })
	if i < 0 {
		return contender{}, false
	}
	return all[i], true
}

// workerMain runs one W3-procs worker and returns its exit code. It opens
// its contender's locker and writes "ready" on stdout; after the driver
// writes one byte on stdin it loops Lock, hold, release until stdin closes
// or the deadline passes, then closes the locker and writes a workerResult
// as JSON on stdout.
func workerMain() int {
	var a workerArgs
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &a); err != nil {
		fmt.Fprintln(os.Stderr, "w3 worker: bad", workerEnv+":", err)
		return 2
	}
	deadline := time.Unix(0, a.Deadline)
	// Whatever hangs (a Lock, a release, Close), never outlive the deadline
	// by more than a moment.
	time.AfterFunc(time.Until(deadline)+2*time.Second, func() {
		fmt.Fprintln(os.Stderr, "w3 worker: past the deadline, exiting")
		os.Exit(3)
	})
	ctx, stop := context.WithDeadline(context.Background(), deadline)
	defer stop()
	c, ok := contenderByName(a.Contender)
	if !ok {
		fmt.Fprintf(os.Stdout, "error: unknown contender %q\n", a.Contender)
		return 1
	}
	lk, err := c.open(ctx, a.Addrs)
	if err != nil {
		fmt.Fprintf(os.Stdout, "error: open: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	started := make(chan error, 1)
	go func() {
		// One byte starts the loop; end of stdin (the driver closed it, or
		// died) stops it.
		in := bufio.NewReader(os.Stdin)
		_, err := in.ReadByte()
		started <- err
		if err == nil {
			_, _ = io.Copy(io.Discard, in)
		}
		stop()
	}()
	fmt.Fprintln(os.Stdout, "ready")
	select {
	case err := <-started:
		if err != nil {
			lk.Close()
			return 1
		}
	case <-ctx.Done():
		lk.Close()
		return 1
	}
	now := func() int64 { return time.Now().UnixNano() }
	res := workerResult{Records: make([]lockRecord, 0, 1024)}
	fail := func(err error) {
		res.Errors++
		if res.FirstErr == "" {
			res.FirstErr = err.Error()
		}
	}
	for ctx.Err() == nil {
		r := lockRecord{Call: now()}
		unlock, err := lk.Lock(ctx, a.Name)
		r.Return = now()
		if err != nil {
			r.Err = err.Error()
			res.Records = append(res.Records, r)
			if ctx.Err() == nil {
				fail(err)
				_ = sleepCtx(ctx, time.Millisecond)
			}
			continue
		}
		time.Sleep(a.Hold)
		r.Release = now()
		if err := unlock(context.WithoutCancel(ctx)); err != nil {
			fail(err)
		} else {
			r.Unlock = now()
		}
		res.Records = append(res.Records, r)
	}
	lk.Close()
	if err := json.NewEncoder(os.Stdout).Encode(&res); err != nil {
		fmt.Fprintln(os.Stderr, "w3 worker:", err)
		return 1
	}
	return 0
}

// procWorker is the driver's side of one worker process.
type procWorker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	ready  chan string // the first line on stdout ("" if none)
	done   chan error  // after the process exited and was reaped
	res    workerResult
	reaped bool
}

// startWorker starts one worker process. Its reader goroutine reads the
// ready line, then the result, then reaps the process.
func startWorker(exe string, args workerArgs) (*procWorker, error) {
	js, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	p := &procWorker{ready: make(chan string, 1), done: make(chan error, 1)}
	p.cmd = exec.Command(exe)
	p.cmd.Env = append(os.Environ(), workerEnv+"="+string(js))
	p.cmd.Stderr = &p.stderr
	// The kernel kills the worker if the driver dies first.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		p.stdin.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		p.stdin.Close()
		out.Close()
		return nil, err
	}
	go func() {
		br := bufio.NewReader(out)
		line, _ := br.ReadString('\n')
		p.ready <- strings.TrimSpace(line)
		rest, rerr := io.ReadAll(br)
		werr := p.cmd.Wait()
		switch {
		case werr != nil:
			rerr = fmt.Errorf("pid %d: %v (stderr: %q)", p.cmd.Process.Pid, werr, tail(p.stderr.String(), 300))
		case rerr != nil:
			rerr = fmt.Errorf("pid %d: stdout: %w", p.cmd.Process.Pid, rerr)
		default:
			if err := json.Unmarshal(rest, &p.res); err != nil {
				rerr = fmt.Errorf("pid %d: result: %w (stdout %q)", p.cmd.Process.Pid, err, tail(string(rest), 200))
			}
		}
		p.done <- rerr
	}()
	return p, nil
}

// collect waits for the worker to report and exit, until by at most; then
// it kills it by PID. It returns the worker's failure, if any.
func (p *procWorker) collect(by time.Time) error {
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	p.reaped = true
	select {
	case err := <-p.done:
		return err
	case <-t.C:
	}
	select {
	case err := <-p.done: // it made it after all
		return err
	default:
	}
	p.cmd.Process.Kill()
	return fmt.Errorf("pid %d: killed, still running after its deadline (%v)", p.cmd.Process.Pid, <-p.done)
}

// contentionProcs runs W3-procs for one contender: W3 with each of the
// workers in its own process.
func contentionProcs(ctx context.Context, c contender, nodes cluster, workers int, hold, warm, dur time.Duration) (metrics, error) {
	m, _, err := runContentionProcs(ctx, c, nodes, workers, hold, warm, dur)
	return m, err
}

// runContentionProcs is contentionProcs; it also returns the workers' PIDs,
// every one of them reaped when it returns.
func runContentionProcs(ctx context.Context, c contender, nodes cluster, workers int, hold, warm, dur time.Duration) (metrics, []int, error) {
	if err := nodes.flush(ctx); err != nil {
		return nil, nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	args := workerArgs{
		Contender: c.name,
		Addrs:     nodes.addrs(),
		Name:      "w3p-" + strconv.FormatInt(cellSeq.Add(1), 10),
		Hold:      hold,
		Deadline:  time.Now().Add(procsStartup + warm + dur + procsGrace).UnixNano(),
	}
	var (
		ps   []*procWorker
		pids []int
	)
	// Every worker is reaped before this returns; on an error path the
	// ones still running are killed by PID first.
	defer func() {
		for _, p := range ps {
			if !p.reaped {
				p.stdin.Close()
				p.cmd.Process.Kill()
				<-p.done //nolint:errcheck // the process was killed: its exit error says nothing
				p.reaped = true
			}
		}
	}()
	for range workers {
		p, err := startWorker(exe, args)
		if err != nil {
			return nil, pids, fmt.Errorf("%s: start worker: %w", c.name, err)
		}
		ps = append(ps, p)
		pids = append(pids, p.cmd.Process.Pid)
	}
	startBy := time.NewTimer(procsStartup)
	defer startBy.Stop()
	for _, p := range ps {
		select {
		case line := <-p.ready:
			if line != "ready" {
				err := <-p.done
				p.reaped = true
				return nil, pids, fmt.Errorf("%s: worker pid %d: %q (%v)", c.name, p.cmd.Process.Pid, line, err)
			}
		case <-startBy.C:
			return nil, pids, fmt.Errorf("%s: worker pid %d not ready within %v", c.name, p.cmd.Process.Pid, procsStartup)
		case <-ctx.Done():
			return nil, pids, ctx.Err()
		}
	}
	for _, p := range ps {
		if _, err := p.stdin.Write([]byte{'g'}); err != nil {
			return nil, pids, fmt.Errorf("%s: worker pid %d: start: %w", c.name, p.cmd.Process.Pid, err)
		}
	}
	w := &window{nodes: nodes}
	probe := startProbe(nodes[0].addr, w)
	werr := w.run(ctx, warm, dur)
	rttLoad := probe.stop()
	// Stop every worker, then collect them; one that has not reported by
	// its own deadline is killed.
	for _, p := range ps {
		p.stdin.Close()
	}
	collectBy := time.Unix(0, args.Deadline).Add(time.Second)
	var errs []error
	for _, p := range ps {
		if err := p.collect(collectBy); err != nil {
			errs = append(errs, err)
		}
	}
	if werr != nil {
		return nil, pids, werr
	}
	if len(errs) > 0 {
		return nil, pids, fmt.Errorf("%s: %d worker(s) failed: %w", c.name, len(errs), errors.Join(errs...))
	}
	recs := make([][]lockRecord, len(ps))
	sm := w3Sample{}
	for i, p := range ps {
		recs[i] = p.res.Records
		sm.errors += p.res.Errors
		if sm.firstErr == "" {
			sm.firstErr = p.res.FirstErr
		}
	}
	sampleRecords(&sm, recs, w.start.UnixNano(), w.end.UnixNano())
	m, err := sm.metrics(c.name, w, rttLoad)
	return m, pids, err
}

// held is one critical section of a worker: [grant, release call].
type held struct {
	worker               int
	call, grant, release int64 // Lock called, Lock returned, release called
}

// sampleRecords fills sm from the workers' records (by worker) for the
// measured interval [start, end) in UnixNano: the critical sections whose
// grant falls inside it, with the gap to the release call of the critical
// section granted just before (by any worker) and the release round trip;
// the waits pending at end; the violations over the whole cell; and every
// grant of the cell with the measured waits, for the overtakes.
func sampleRecords(sm *w3Sample, recs [][]lockRecord, start, end int64) {
	var all []held
	sm.perWorker = make([]int, len(recs))
	for id, rs := range recs {
		for _, r := range rs {
			if r.Call < end && r.Return >= end {
				sm.pendingMax = max(sm.pendingMax, time.Duration(end-r.Call))
			}
			if r.Err == "" {
				all = append(all, held{worker: id, call: r.Call, grant: r.Return, release: r.Release})
				sm.grantLog = append(sm.grantLog, grantAt{worker: id, at: r.Return})
				if r.Unlock != 0 && r.Return >= start && r.Return < end {
					sm.releases = append(sm.releases, time.Duration(r.Unlock-r.Release))
				}
			}
		}
	}
	slices.SortFunc(all, func(a, b held) int { return cmp.Compare(a.grant, b.grant) })
	sm.violations = int64(overlaps(all))
	for i, h := range all {
		if h.grant < start || h.grant >= end {
			continue
		}
		sm.waits = append(sm.waits, time.Duration(h.grant-h.call))
		sm.spans = append(sm.spans, waitSpan{worker: h.worker, call: h.call, grant: h.grant})
		if i > 0 {
			prev := all[i-1]
			gap := time.Duration(h.grant - prev.release)
			sm.gaps = append(sm.gaps, gap)
			if prev.worker != h.worker {
				sm.other++
				sm.otherGaps = append(sm.otherGaps, gap)
			}
		}
		sm.perWorker[h.worker]++
		sm.busy += time.Duration(h.release - h.grant)
		sm.holds = append(sm.holds, time.Duration(h.release-h.grant))
	}
}

// overlaps counts the critical sections, sorted by grant, that began
// before an earlier one's release call: each is a mutual-exclusion
// violation.
func overlaps(sorted []held) int {
	n := 0
	var lastRelease int64
	for i, h := range sorted {
		if i > 0 && h.grant < lastRelease {
			n++
		}
		lastRelease = max(lastRelease, h.release)
	}
	return n
}
