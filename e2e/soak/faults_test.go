package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// faultKinds are what the injector does, one at a time, at random.
var faultKinds = []string{
	"pause-valkey", // SIGSTOP the node, SIGCONT it 0.2-1.5s later
	"kill-valkey",  // SIGKILL the node and restart it (append-only file, fsync always: keys survive)
	"pause-serve",  // SIGSTOP dlock serve for 0.2-2s
	"kill-serve",   // SIGKILL dlock serve and start it again
	"delay-link",   // 100-800ms latency on one link for 0.5-3s
	"pause-worker", // SIGSTOP a worker process for 0.5-2.5s
	"kill-worker",  // SIGKILL a worker process and start another
	"crash-client", // close a Locker's store under it, then start a new one
}

type faultEvent struct {
	t    int64
	kind string
}

// injector injects faults from one seeded source. Its run loop stays on
// the test goroutine (restarts may fail the test).
type injector struct {
	t       *testing.T
	rng     *rand.Rand
	node    *testredis.Server
	srv     *service
	links   []*toxiproxy.Proxy
	workers []*workerSlot
	clients []*libClient
	// spawn replaces a killed worker; restart restarts a crashed client.
	spawn   func(w *workerSlot)
	restart func(c *libClient)

	mu     sync.Mutex
	events []faultEvent
	counts map[string]int
}

func (in *injector) record(kind string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.events = append(in.events, faultEvent{wire.Now(), kind})
	in.counts[kind]++
}

func (in *injector) total() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.events)
}

func (in *injector) span(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(in.rng.Int64N(int64(hi-lo)))
}

// inject does one random fault and returns once it is over. killServe is
// false near the end of the run, so the last server instance serves long
// enough for its growth to mean something.
func (in *injector) inject(killServe bool) {
	kind := faultKinds[in.rng.IntN(len(faultKinds))]
	if kind == "kill-serve" && !killServe {
		kind = "pause-serve"
	}
	in.record(kind)
	switch kind {
	case "pause-valkey":
		in.node.Pause()
		time.Sleep(in.span(200*time.Millisecond, 1500*time.Millisecond))
		in.node.Resume()
	case "kill-valkey":
		in.node.Restart(in.t)
	case "pause-serve":
		if in.srv.signal(syscall.SIGSTOP) == nil {
			waitProcState(in.srv.pid(), 'T', 5*time.Second)
			time.Sleep(in.span(200*time.Millisecond, 2*time.Second))
			in.srv.signal(syscall.SIGCONT)
		}
	case "kill-serve":
		in.srv.kill()
		if err := in.srv.start(); err != nil {
			in.t.Fatalf("restart dlock serve: %v", err)
		}
	case "delay-link":
		p := in.links[in.rng.IntN(len(in.links))]
		stream := []string{"upstream", "downstream"}[in.rng.IntN(2)]
		lat := in.span(100*time.Millisecond, 800*time.Millisecond)
		b, _ := json.Marshal(map[string]any{"name": "soak-delay", "type": "latency", "stream": stream,
			"attributes": map[string]any{"latency": lat.Milliseconds(), "jitter": 50}})
		if _, err := p.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
			in.t.Fatalf("add latency to %s: %v", p.Name, err)
		}
		time.Sleep(in.span(500*time.Millisecond, 3*time.Second))
		if err := p.Toxics.RemoveToxic(in.t.Context(), "soak-delay"); err != nil {
			in.t.Fatalf("remove latency from %s: %v", p.Name, err)
		}
	case "pause-worker":
		w := in.workers[in.rng.IntN(len(in.workers))]
		cmd, _ := w.current()
		if cmd != nil && w.running() && cmd.Process.Signal(syscall.SIGSTOP) == nil {
			waitProcState(cmd.Process.Pid, 'T', 5*time.Second)
			time.Sleep(in.span(500*time.Millisecond, 2500*time.Millisecond))
			cmd.Process.Signal(syscall.SIGCONT)
		}
	case "kill-worker":
		w := in.workers[in.rng.IntN(len(in.workers))]
		w.kill()
		in.spawn(w)
	case "crash-client":
		c := in.clients[in.rng.IntN(len(in.clients))]
		c.stop(true)
		in.restart(c)
	}
}

// quiesce undoes every fault still in force (none is, between injects,
// but a failed test may stop midway).
func (in *injector) quiesce() {
	in.node.Resume()
	in.srv.signal(syscall.SIGCONT)
	for _, p := range in.links {
		p.Toxics.RemoveToxic(in.t.Context(), "soak-delay")
	}
}

func (in *injector) summary() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := ""
	for _, k := range faultKinds {
		s += fmt.Sprintf("%s %d, ", k, in.counts[k])
	}
	return s[:len(s)-2]
}
