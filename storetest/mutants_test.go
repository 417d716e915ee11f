package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A mutant is the memory store with one bug planted. TestMutants checks
// that the suite catches each one, so that no check silently goes blind.
var mutants = []struct {
	name string
	// run selects the subtest expected to fail (the whole suite would be
	// slow and say nothing more).
	run string
}{
	{"release-any", "Mutex/OnlyHolderReleasesAndExtends"},
	{"extend-any", "Mutex/OnlyHolderReleasesAndExtends"},
	{"fence-repeat", "Mutex/FencesIncrease"},
	{"fence-repeat", "MutexLocker/FencesIncrease"},
	{"no-refresh", "Mutex/IdempotentAcquire"},
	{"retry-after-ttl", "Mutex/RetryAfter"},
	{"expire-early", "Mutex/TTLExpiry"},
	{"expire-early", "MutexLocker/WaiterWokenOnExpiry"},
	{"double-grant", "Mutex/MutualExclusion"},
	{"double-grant", "MutexLocker/MutualExclusion"},
	{"extend-noop", "MutexLocker/WatchdogSurvives"},
	{"extend-noop", "Mutex/ExtendBatch"},
	{"state-none", "Mutex/Inspector"},
	{"modes-apart", "CrossPattern/Pair/write-then-mutex"},
	{"modes-apart", "CrossPattern/MixedGoroutines"},
	{"held-as-mutex", "CrossPattern/Pair/read-then-write"},
}

const mutantEnv = "STORETEST_MUTANT"

// TestMutants runs TestMutant in a child process once per mutant and
// expects the named subtest to fail.
func TestMutants(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("in a mutant child")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	for _, m := range mutants {
		t.Run(m.name+"/"+m.run, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMutant$/^"+strings.ReplaceAll(m.run, "/", "$/^")+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+m.name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed the %s mutant in %s; want a failure\n%s", m.name, m.run, out)
			}
			if want := "--- FAIL: TestMutant/" + m.run; !strings.Contains(string(out), want) {
				t.Fatalf("child output lacks %q:\n%s", want, out)
			}
		})
	}
}

// TestMutant runs the suite on the mutant named by $STORETEST_MUTANT.
func TestMutant(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("run by TestMutants")
	}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			return &mutant{Store: memory.New(), kind: name, held: map[string]hold{}}
		},
	})
}

// mutant wraps a memory store and remembers each lock's last grant so that
// it can misbehave convincingly.
type mutant struct {
	*memory.Store
	kind string

	mu   sync.Mutex
	held map[string]hold
}

type hold struct {
	token string
	grant store.Grant
	ttl   time.Duration
}

// apart gives each mode of a name its own name in the "modes-apart"
// mutant: the patterns no longer exclude each other.
func (m *mutant) apart(req store.Request) store.Request {
	if m.kind == "modes-apart" {
		req.Name += "#" + req.Mode.String()
	}
	return req
}

func (m *mutant) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	return m.Store.Watch(ctx, m.apart(store.Request{Name: name, Mode: mode}).Name, mode)
}

func (m *mutant) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	req = m.apart(req)
	m.mu.Lock()
	h, ok := m.held[req.Name]
	m.mu.Unlock()
	switch {
	case m.kind == "no-refresh" && ok && h.token == req.Token:
		return h.grant, nil // the retry does not reach the store
	case m.kind == "expire-early":
		req.TTL /= 2
	}
	g, err := m.Store.Acquire(ctx, req)
	if err != nil {
		return g, err
	}
	if m.kind == "held-as-mutex" {
		g.Held = store.ModeMutex
	}
	switch {
	case g.Acquired:
		if m.kind == "fence-repeat" {
			g.Fence = 7
		}
		m.mu.Lock()
		if !ok || h.token != req.Token {
			m.held[req.Name] = hold{req.Token, g, req.TTL}
		}
		m.mu.Unlock()
	case m.kind == "retry-after-ttl" && ok:
		g.RetryAfter = h.ttl
	case m.kind == "double-grant" && ok:
		return store.Grant{Acquired: true, Fence: h.grant.Fence}, nil
	}
	return g, nil
}

func (m *mutant) Extend(ctx context.Context, reqs []store.Request) []error {
	if m.kind == "extend-noop" {
		return make([]error, len(reqs))
	}
	if m.kind == "extend-any" {
		reqs = m.asHolder(reqs)
	}
	apart := make([]store.Request, len(reqs))
	for i, r := range reqs {
		apart[i] = m.apart(r)
	}
	return m.Store.Extend(ctx, apart)
}

func (m *mutant) Release(ctx context.Context, req store.Request) error {
	if m.kind == "release-any" {
		req = m.asHolder([]store.Request{req})[0]
	}
	return m.Store.Release(ctx, m.apart(req))
}

func (m *mutant) State(ctx context.Context, name string) (store.State, error) {
	st, err := m.Store.State(ctx, name)
	if m.kind == "state-none" {
		st.Holders = 0
	}
	return st, err
}

// asHolder rewrites requests to carry the token of the lock's last holder.
func (m *mutant) asHolder(reqs []store.Request) []store.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]store.Request, len(reqs))
	for i, r := range reqs {
		if h, ok := m.held[r.Name]; ok {
			r.Token = h.token
		}
		out[i] = r
	}
	return out
}
