package storetest_test

import (
	"context"
	"errors"
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
	// Issue 38: the hold's record and bounds, Resume and ForceRelease.
	{"no-since", "Hold/Record"},
	{"owners-one", "Hold/Record"},
	{"record-dropped", "Hold/RecordLimits"},
	{"record-lingers", "Hold/RecordGoneAfterRelease"},
	{"record-lingers", "Hold/RecordGoneAfterExpiry"},
	{"invalid-accepted", "Hold/Invalid"},
	{"minhold-ignored", "Hold/MinHold"},
	{"minhold-ignored", "CrossPattern/MinHoldAgainstModes"},
	{"release-ignored", "Hold/MinHoldPassed"},
	{"release-ignored", "Hold/MinHoldShared"},
	{"maxhold-ignored", "Hold/MaxHold"},
	{"maxhold-ignored", "Hold/ResumeMaxHold"},
	{"resume-any-mode", "Hold/ResumeRefused"},
	{"resume-acquires", "Hold/ResumeExpired"},
	{"resume-no-extend", "Hold/Resume"},
	{"force-by-release", "Hold/ForceReleaseMinHold"},
	{"force-drops-queue", "Hold/ForceReleaseQueue"},
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
			return &mutant{Store: memory.New(), kind: name, held: map[string]hold{}, minHold: map[string]bool{}, queued: map[string]string{}, lastRecord: map[string][2]string{}}
		},
	})
}

// mutant wraps a memory store and remembers each lock's last grant so that
// it can misbehave convincingly.
type mutant struct {
	*memory.Store
	kind string

	mu      sync.Mutex
	held    map[string]hold
	minHold map[string]bool   // tokens acquired with a MinHold
	queued  map[string]string // a name's last refused queued token
	// lastRecord is a name's last Holder and Data (record-lingers).
	lastRecord map[string][2]string
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
	req = m.record(req)
	if m.kind == "record-lingers" {
		m.mu.Lock()
		if req.Holder != "" {
			m.lastRecord[req.Name] = [2]string{req.Holder, req.Data}
		} else if r, ok := m.lastRecord[req.Name]; ok {
			req.Holder, req.Data = r[0], r[1] // the last hold's record, left behind
		}
		m.mu.Unlock()
	}
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
	if req.Queue && !g.Acquired {
		m.mu.Lock()
		m.queued[req.Name] = req.Token
		m.mu.Unlock()
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
		if req.MinHold > 0 {
			m.minHold[req.Token] = true
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
	m.mu.Lock()
	keep := m.kind == "release-ignored" && m.minHold[req.Token]
	m.mu.Unlock()
	if keep {
		return nil // a MinHold kept for good
	}
	if m.kind == "release-any" {
		req = m.asHolder([]store.Request{req})[0]
	}
	return m.Store.Release(ctx, m.apart(req))
}

func (m *mutant) State(ctx context.Context, name string) (store.State, error) {
	st, err := m.Store.State(ctx, name)
	switch {
	case m.kind == "state-none":
		st.Holders = 0
	case m.kind == "no-since":
		for i := range st.Owners {
			st.Owners[i].Since = time.Time{}
		}
	case m.kind == "owners-one" && len(st.Owners) > 1:
		st.Owners = st.Owners[:1]
	}
	return st, err
}

// record breaks the record fields of req as the hold mutants ask.
func (m *mutant) record(req store.Request) store.Request {
	switch m.kind {
	case "record-dropped":
		req.Data = ""
	case "invalid-accepted":
		req.Holder, req.Data = strings.ToValidUTF8(req.Holder[:min(len(req.Holder), store.MaxHolderLen)], "?"), req.Data[:min(len(req.Data), store.MaxDataLen)]
		req.MinHold, req.MaxHold = max(req.MinHold, 0), max(req.MaxHold, 0)
		if req.MaxHold > 0 && req.MinHold > req.MaxHold {
			req.MinHold = req.MaxHold
		}
	case "minhold-ignored":
		req.MinHold = 0
	case "maxhold-ignored":
		req.MaxHold = 0
	}
	return req
}

func (m *mutant) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	g, err := m.Store.Resume(ctx, req)
	switch {
	case m.kind == "resume-no-extend" && err == nil:
		g.TTL = req.TTL // says so, without extending
		m.Store.Extend(ctx, []store.Request{{Name: req.Name, Token: req.Token, Mode: req.Mode, TTL: time.Second}})
	case m.kind == "resume-any-mode" && errors.Is(err, store.ErrNotHeld):
		for _, mode := range []store.Mode{store.ModeMutex, store.ModeRead, store.ModeWrite, store.ModeFair, store.ModeElection} {
			other := req
			other.Mode = mode
			if g, err = m.Store.Resume(ctx, other); err == nil {
				break
			}
		}
	case m.kind == "resume-acquires" && errors.Is(err, store.ErrNotHeld):
		return m.Store.Acquire(ctx, req)
	}
	return g, err
}

func (m *mutant) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	switch m.kind {
	case "force-by-release": // by the tokens it knows, as a Release would: a MinHold keeps
		st, err := m.Store.State(ctx, name)
		m.mu.Lock()
		h, ok := m.held[name]
		m.mu.Unlock()
		if ok {
			m.Store.Release(ctx, store.Request{Name: name, Token: h.token, Mode: st.Mode})
		}
		return st.Owners, err
	case "force-drops-queue": // and the queue with it
		st, _ := m.Store.State(ctx, name)
		ended, err := m.Store.ForceRelease(ctx, name)
		if st.Queue > 0 {
			for _, mode := range []store.Mode{store.ModeFair, store.ModeWrite} {
				m.Store.Release(ctx, store.Request{Name: name, Token: m.queued[name], Mode: mode})
			}
		}
		return ended, err
	}
	return m.Store.ForceRelease(ctx, name)
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
