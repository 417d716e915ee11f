// Command worker is the client process of the fault-injection suite
// (e2e/faults). It takes a dlock lock over and over, enters a critical
// section, reads and writes a fenced register over HTTP, and prints one JSON
// event per line (package wire) with CLOCK_MONOTONIC timestamps. It is a
// separate process so that the harness can SIGSTOP, SIGCONT and SIGKILL it,
// and so that its replies can wait in kernel socket buffers while it is
// stopped, as they would during a real GC pause.
//
// It is built by the harness; it is not meant to be run by hand.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

type config struct {
	id          int
	store       string
	addrs       []string
	register    string
	key         string
	mode        string
	ttl         time.Duration
	autoRenew   bool
	renew       time.Duration
	opTimeout   time.Duration
	iters       int
	duration    time.Duration
	hold        time.Duration
	gap         time.Duration
	wait        time.Duration
	rmw         bool
	careful     bool
	stopIter    int
	stopAt      string
	staleRaw    bool
	holdFirst   time.Duration
	drift       float64
	nodeTimeout time.Duration
	startAfter  time.Duration
	queueTTL    time.Duration
	names       []string
	clockLib    string
	minHold     time.Duration
	tokenFile   string
	resumeFile  string
	unconfirmed bool
	// opts are the -opt key=value pairs, read by the openers of
	// extraStores (each store's file says which it takes).
	opts map[string]string
}

// extraStores open the stores that have a file of their own in this
// directory (sentinel, cluster, etcd, ...): each registers itself here in
// an init, so a new store touches neither openStore nor the flags.
var extraStores = map[string]func(context.Context, config) (store.Store, func(), error){}

// optsFlag collects repeated -opt key=value flags.
type optsFlag map[string]string

func (o optsFlag) String() string { return fmt.Sprint(map[string]string(o)) }

func (o optsFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("-opt %q: want key=value", v)
	}
	o[k] = val
	return nil
}

func main() {
	var c config
	var addrs string
	flag.IntVar(&c.id, "id", 0, "worker ID")
	flag.StringVar(&c.store, "store", "valkey", "valkey, redlock, or a store of extraStores")
	flag.StringVar(&addrs, "addrs", "", "comma-separated host:port of the lock nodes")
	flag.StringVar(&c.register, "register", "", "base URL of the fenced register")
	flag.StringVar(&c.key, "key", "x", "lock name")
	flag.StringVar(&c.mode, "mode", "mutex", "mutex, read, write, fair, election or multi")
	var names string
	flag.StringVar(&names, "names", "", "multi: comma-separated lock names (the multi-lock's)")
	flag.DurationVar(&c.ttl, "ttl", time.Second, "lease TTL")
	flag.BoolVar(&c.autoRenew, "autorenew", false, "renew the lease in the background")
	flag.DurationVar(&c.renew, "renew", 0, "renew interval (0: TTL/3)")
	flag.DurationVar(&c.opTimeout, "op-timeout", 0, "per-operation store timeout (0: library default)")
	flag.IntVar(&c.iters, "iters", 1, "grants to attempt")
	flag.DurationVar(&c.duration, "duration", time.Minute, "stop attempting after this long")
	flag.DurationVar(&c.hold, "hold", 0, "time spent in the critical section")
	flag.DurationVar(&c.holdFirst, "hold-first", -1, "hold of the first iteration (-1: -hold)")
	flag.DurationVar(&c.gap, "gap", 0, "pause between iterations")
	flag.DurationVar(&c.wait, "wait", 0, "wait this long for the lock (0: TryLock)")
	flag.BoolVar(&c.rmw, "rmw", false, "read-sleep-write the register counter (else write only)")
	flag.BoolVar(&c.careful, "careful", false, "abandon the critical section when the lease is lost")
	flag.IntVar(&c.stopIter, "stop-iter", -1, "iteration in which the worker SIGSTOPs itself")
	flag.StringVar(&c.stopAt, "stop-at", "enter", "where it stops: enter (after entering) or write (just before writing)")
	flag.BoolVar(&c.staleRaw, "stale-raw", false, "after each release, also release and extend (60s) on the store with the old token")
	flag.Float64Var(&c.drift, "drift", 0, "drift factor (0: library default)")
	flag.DurationVar(&c.nodeTimeout, "node-timeout", 0, "redlock: per-node timeout (0: library default)")
	flag.DurationVar(&c.startAfter, "start-after", 0, "wait this long after the start event before the first attempt")
	flag.DurationVar(&c.queueTTL, "queue-ttl", 0, "queue place TTL of fair and write waiters (0: library default)")
	c.opts = map[string]string{}
	flag.Var(optsFlag(c.opts), "opt", "key=value for the store's opener (repeatable)")
	flag.StringVar(&c.clockLib, "clock-lib", "", "negative control: run the Valkey/Redis scripts with this clock_lib.lua instead of the embedded one")
	flag.DurationVar(&c.minHold, "min-hold", 0, "WithMinHold: a release before grant+d leaves the name held until then")
	flag.StringVar(&c.tokenFile, "token-file", "", "persist each grant's name, token, mode and fence in this file before its section")
	flag.StringVar(&c.resumeFile, "resume-file", "", "iteration 0 resumes (Locker.Resume) the lease persisted in this file by -token-file instead of acquiring")
	flag.BoolVar(&c.unconfirmed, "resume-unconfirmed", false, "negative control: -resume-file takes the persisted fence as its lease without asking the store")
	flag.Parse()
	if c.clockLib != "" {
		n, err := swapClockLib(c.clockLib)
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "worker: %d scripts run %s\n", n, c.clockLib)
	}
	if addrs != "" {
		c.addrs = strings.Split(addrs, ",")
	}
	if names != "" {
		c.names = strings.Split(names, ",")
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// logger prints events, one JSON object per line, from any goroutine.
type logger struct {
	mu  sync.Mutex
	enc *json.Encoder
	id  int
}

func (l *logger) log(ev wire.Event) {
	ev.W = l.id
	if ev.T == 0 {
		ev.T = wire.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.enc.Encode(ev) // stdout is a pipe to the harness; nothing to do on error
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func openStore(ctx context.Context, c config) (store.Store, func(), error) {
	if open, ok := extraStores[c.store]; ok {
		return open(ctx, c)
	}
	switch c.store {
	case "valkey":
		if len(c.addrs) != 1 {
			return nil, nil, fmt.Errorf("store valkey takes one address, got %d", len(c.addrs))
		}
		s, err := valkey.Dial(ctx, "redis://"+c.addrs[0])
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	case "redlock":
		var nodes []store.Store
		var closers []func() error
		closeAll := func() {
			for _, f := range closers {
				_ = f()
			}
		}
		for _, a := range c.addrs {
			s, err := valkey.Dial(ctx, "redis://"+a)
			if err != nil {
				// A node that is down at start is a node that is down:
				// the quorum decides, as it would later.
				fmt.Fprintf(os.Stderr, "worker: dial %s: %v\n", a, err)
				nodes = append(nodes, deadStore{err})
				continue
			}
			nodes = append(nodes, s)
			closers = append(closers, s.Close)
		}
		var ropts []redlock.Option
		if c.nodeTimeout > 0 {
			ropts = append(ropts, redlock.WithNodeTimeout(c.nodeTimeout))
		}
		rl, err := redlock.New(nodes, ropts...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return rl, func() { rl.Close(); closeAll() }, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q", c.store)
}

// deadStore stands for a node that could not be dialled at start.
type deadStore struct{ err error }

func (d deadStore) Acquire(context.Context, dlock.Request) (store.Grant, error) {
	return store.Grant{}, &dlock.StoreError{Op: "acquire", Node: -1, Err: d.err}
}

func (d deadStore) Extend(_ context.Context, reqs []dlock.Request) []error {
	errs := make([]error, len(reqs))
	for i := range errs {
		errs[i] = &dlock.StoreError{Op: "extend", Node: -1, Err: d.err}
	}
	return errs
}

func (d deadStore) Release(context.Context, dlock.Request) error {
	return &dlock.StoreError{Op: "release", Node: -1, Err: d.err}
}

func (d deadStore) RaiseFence(context.Context, dlock.Request, int64) error {
	return &dlock.StoreError{Op: "raise fence", Node: -1, Err: d.err}
}

func (d deadStore) Watch(context.Context, string, dlock.Mode) (<-chan struct{}, func(), error) {
	return nil, nil, &dlock.StoreError{Op: "watch", Node: -1, Err: d.err}
}

// acquirer is the part of every lock type the worker uses.
type acquirer interface {
	TryLock(ctx context.Context) (*dlock.Lease, error)
	Lock(ctx context.Context) (*dlock.Lease, error)
}

// electionSide campaigns in an election: TryLock makes one attempt, Lock
// waits (Election.Campaign, which always renews).
type electionSide struct {
	l     *dlock.Locker
	e     *dlock.Election
	name  string
	value string
}

func (e electionSide) TryLock(ctx context.Context) (*dlock.Lease, error) {
	return e.l.Acquire(ctx, dlock.Request{Name: e.name, Mode: dlock.ModeElection, Value: e.value}, false)
}
func (e electionSide) Lock(ctx context.Context) (*dlock.Lease, error) {
	return e.e.Campaign(ctx, e.value)
}

type readSide struct{ rw *dlock.RWMutex }

func (r readSide) TryLock(ctx context.Context) (*dlock.Lease, error) { return r.rw.TryRLock(ctx) }
func (r readSide) Lock(ctx context.Context) (*dlock.Lease, error)    { return r.rw.RLock(ctx) }

func run(c config) error {
	lg := &logger{enc: json.NewEncoder(os.Stdout), id: c.id}
	ctx := context.Background()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, closeStore, err := openStore(dctx, c)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		// valkey-go's Close waits for replies still in flight, which a
		// latency toxic can hold back for long: give it a moment, no more.
		done := make(chan struct{})
		go func() { closeStore(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}()

	opts := []dlock.Option{
		dlock.WithTTL(c.ttl),
		dlock.WithObserver(func(ev dlock.Event) {
			if ev.Kind == dlock.EventRenew {
				lg.log(wire.Event{Kind: wire.KindRenew, Result: ev.Result, Fence: ev.Fence})
			}
		}),
	}
	if c.autoRenew {
		opts = append(opts, dlock.WithAutoRenew())
	}
	if c.renew > 0 {
		opts = append(opts, dlock.WithRenewInterval(c.renew))
	}
	if c.opTimeout > 0 {
		opts = append(opts, dlock.WithOpTimeout(c.opTimeout))
	}
	if c.queueTTL > 0 {
		opts = append(opts, dlock.WithQueueTTL(c.queueTTL))
	}
	if c.drift > 0 {
		opts = append(opts, dlock.WithDriftFactor(c.drift))
	}
	if c.minHold > 0 {
		opts = append(opts, dlock.WithMinHold(c.minHold))
	}
	if c.wait > 0 {
		opts = append(opts, dlock.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	}
	locker, err := dlock.New(st, opts...)
	if err != nil {
		return err
	}
	defer locker.Close()

	var lk acquirer
	switch c.mode {
	case "mutex":
		lk = locker.Mutex(c.key)
	case "read":
		lk = readSide{locker.RWMutex(c.key)}
	case "write":
		lk = locker.RWMutex(c.key)
	case "fair":
		lk = locker.Fair(c.key)
	case "election":
		lk = electionSide{l: locker, e: locker.Election(c.key), name: c.key, value: "worker-" + strconv.Itoa(c.id)}
	case "multi":
		return runMulti(ctx, c, lg, locker)
	default:
		return fmt.Errorf("unknown mode %q", c.mode)
	}

	reg := &register{base: c.register, client: &http.Client{Timeout: 30 * time.Second}, lg: lg}
	lg.log(wire.Event{Kind: wire.KindStart})
	if c.resumeFile != "" && c.unconfirmed {
		return unconfirmedResume(c, lg, reg)
	}
	return loop(ctx, c, lg, st, reg, lk, locker)
}

// runMulti takes the multi-lock on c.names -iters times (waiting up to
// -wait), holds it for -hold and releases it. The acquire event's fence is
// that of the first name.
func runMulti(ctx context.Context, c config, lg *logger, locker *dlock.Locker) error {
	lg.log(wire.Event{Kind: wire.KindStart})
	m := locker.Multi(c.names)
	for i := 0; i < c.iters; i++ {
		lg.log(wire.Event{Kind: wire.KindInvoke, Iter: i, Mode: c.mode})
		actx, cancel := context.WithTimeout(ctx, max(c.wait, time.Second))
		ml, err := m.Lock(actx)
		cancel()
		if err != nil {
			lg.log(wire.Event{Kind: wire.KindFail, Iter: i, Mode: c.mode, Err: errString(err)})
			continue
		}
		lg.log(wire.Event{Kind: wire.KindAcquire, Iter: i, Mode: c.mode, Fence: ml.Fence(c.names[0])})
		time.Sleep(c.hold)
		err = ml.Release(ctx)
		lg.log(wire.Event{Kind: wire.KindRelease, Iter: i, Err: errString(err)})
	}
	lg.log(wire.Event{Kind: wire.KindDone})
	return nil
}

// loop is the worker's life with one lock: -iters grants, each with its
// critical section.
func loop(ctx context.Context, c config, lg *logger, st store.Store, reg *register, lk acquirer, locker *dlock.Locker) error {
	var err error
	time.Sleep(c.startAfter)
	deadline := time.Now().Add(c.duration)
	var watchers sync.WaitGroup
	defer watchers.Wait()
	for i := 0; i < c.iters && time.Now().Before(deadline); i++ {
		if i > 0 && c.gap > 0 {
			time.Sleep(c.gap)
		}
		lg.log(wire.Event{Kind: wire.KindInvoke, Iter: i, Mode: c.mode})
		var lease *dlock.Lease
		op := ""
		if i == 0 && c.resumeFile != "" {
			op = "resume"
			lease, err = resumeLease(ctx, c, locker)
		} else if c.wait > 0 {
			actx, cancel := context.WithTimeout(ctx, c.wait)
			lease, err = lk.Lock(actx)
			cancel()
		} else {
			lease, err = lk.TryLock(ctx)
		}
		if err != nil {
			lg.log(wire.Event{Kind: wire.KindFail, Iter: i, Mode: c.mode, Op: op, Err: errString(err)})
			continue
		}
		if c.tokenFile != "" {
			if err := persistLease(c.tokenFile, lease); err != nil {
				return err
			}
		}
		// Val: the validity the lease has left (Lease.TTL), counted by the
		// Locker from when the granting request was sent.
		lg.log(wire.Event{Kind: wire.KindAcquire, Iter: i, Mode: c.mode, Op: op, Fence: lease.Fence(), Val: int64(lease.TTL())})
		watchers.Add(1)
		go func(i int) {
			defer watchers.Done()
			<-lease.Done()
			if err := lease.Err(); err != nil {
				lg.log(wire.Event{Kind: wire.KindLost, Iter: i, Fence: lease.Fence(), Err: err.Error()})
			}
		}(i)
		critical(c, lg, reg, lease, i)
		err = lease.Release(ctx)
		lg.log(wire.Event{Kind: wire.KindRelease, Iter: i, Fence: lease.Fence(), Err: errString(err)})
		if c.staleRaw {
			staleOps(ctx, c, lg, st, lease, i)
		}
	}
	lg.log(wire.Event{Kind: wire.KindDone})
	return nil
}

// held is what a critical section uses of its lease: a *dlock.Lease, or
// the negative control's unconfirmed resume.
type held interface {
	Fence() int64
	Done() <-chan struct{}
}

// critical is the critical section of one grant.
func critical(c config, lg *logger, reg *register, lease held, i int) {
	fence := lease.Fence()
	lg.log(wire.Event{Kind: wire.KindEnter, Iter: i, Fence: fence, Mode: c.mode})
	defer lg.log(wire.Event{Kind: wire.KindExit, Iter: i, Fence: fence, Mode: c.mode})
	stop := func(at string) {
		if c.stopIter == i && c.stopAt == at {
			// SIGSTOP reaches the threads of the process asynchronously: this
			// goroutine could run on for a moment. Wait for the SIGCONT that
			// resumes us, so nothing after this point runs before it.
			cont := make(chan os.Signal, 1)
			signal.Notify(cont, syscall.SIGCONT)
			lg.log(wire.Event{Kind: wire.KindStopSelf, Iter: i, Fence: fence, Op: at})
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			<-cont
			signal.Stop(cont)
		}
	}
	lost := func() bool {
		if !c.careful {
			return false
		}
		select {
		case <-lease.Done():
			return true
		default:
			return false
		}
	}
	stop("enter")
	if lost() {
		return
	}
	val := int64(c.id*1_000_000 + i)
	if c.rmw && c.mode != "read" {
		v, ok := reg.read(i, fence)
		if !ok {
			return
		}
		val = v + 1
	}
	if c.mode == "read" {
		reg.read(i, fence)
	}
	hold := c.hold
	if i == 0 && c.holdFirst >= 0 {
		hold = c.holdFirst
	}
	if hold > 0 {
		t := time.NewTimer(hold)
		if c.careful {
			select {
			case <-t.C:
			case <-lease.Done():
			}
		} else {
			<-t.C
		}
		t.Stop()
	}
	stop("write")
	if lost() || c.mode == "read" {
		return
	}
	reg.write(i, fence, val)
}

// staleOps calls the store directly with a token that has been released (or
// whose lease was lost): both calls must find nothing to release or extend,
// whoever holds the lock now.
func staleOps(ctx context.Context, c config, lg *logger, st store.Store, lease *dlock.Lease, i int) {
	mode := lease.Mode()
	req := dlock.Request{Name: c.key, Token: lease.Token(), Mode: mode, TTL: time.Minute}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := st.Extend(octx, []dlock.Request{req})[0]
	lg.log(wire.Event{Kind: wire.KindRaw, Iter: i, Op: "extend", Fence: lease.Fence(), Err: errString(err), Accepted: err == nil})
	err = st.Release(octx, req)
	lg.log(wire.Event{Kind: wire.KindRaw, Iter: i, Op: "release", Fence: lease.Fence(), Err: errString(err), Accepted: err == nil})
}

// register is the client of the harness's fenced register.
type register struct {
	base   string
	client *http.Client
	lg     *logger
}

type regReply struct {
	OK  bool  `json:"ok"`
	Val int64 `json:"val"`
}

func (r *register) call(op string, i int, fence, val int64) (regReply, error) {
	q := url.Values{}
	q.Set("w", strconv.Itoa(r.lg.id))
	q.Set("i", strconv.Itoa(i))
	q.Set("fence", strconv.FormatInt(fence, 10))
	q.Set("val", strconv.FormatInt(val, 10))
	resp, err := r.client.Post(r.base+"/"+op+"?"+q.Encode(), "text/plain", nil)
	if err != nil {
		return regReply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return regReply{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return regReply{}, errors.New(resp.Status)
	}
	var rep regReply
	err = json.Unmarshal(body, &rep)
	return rep, err
}

// read reads the register with fence; ok is false when the register refused
// the read (a higher fence was seen) or did not answer.
func (r *register) read(i int, fence int64) (int64, bool) {
	r.lg.log(wire.Event{Kind: wire.KindReadCall, Iter: i, Fence: fence})
	rep, err := r.call("read", i, fence, 0)
	r.lg.log(wire.Event{Kind: wire.KindRead, Iter: i, Fence: fence, Val: rep.Val, Accepted: rep.OK, Err: errString(err)})
	return rep.Val, err == nil && rep.OK
}

func (r *register) write(i int, fence, val int64) {
	r.lg.log(wire.Event{Kind: wire.KindWriteCall, Iter: i, Fence: fence, Val: val})
	rep, err := r.call("write", i, fence, val)
	r.lg.log(wire.Event{Kind: wire.KindWrite, Iter: i, Fence: fence, Val: val, Accepted: rep.OK, Err: errString(err)})
}
