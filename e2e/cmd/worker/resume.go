package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

// persisted is what -token-file keeps of a grant, as a process that means
// to resume its lease after a restart keeps it.
type persisted struct {
	Name  string     `json:"name"`
	Token string     `json:"token"`
	Mode  dlock.Mode `json:"mode"`
	Fence int64      `json:"fence"`
}

// persistLease writes the lease to path (a new file renamed over the old,
// synced) before its critical section begins.
func persistLease(path string, l *dlock.Lease) error {
	b, err := json.Marshal(persisted{Name: l.Name(), Token: l.Token(), Mode: l.Mode(), Fence: l.Fence()})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func readPersisted(path string) (persisted, error) {
	var p persisted
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// resumeLease takes back the lease persisted in -resume-file: the store
// confirms the token still holds the name in its mode and extends it by
// -ttl (auto-renewed with -autorenew, the Locker's option).
func resumeLease(ctx context.Context, c config, locker *dlock.Locker) (*dlock.Lease, error) {
	p, err := readPersisted(c.resumeFile)
	if err != nil {
		return nil, err
	}
	if p.Name != c.key {
		return nil, fmt.Errorf("%s holds a lease of %q, not -key %q", c.resumeFile, p.Name, c.key)
	}
	rctx, cancel := context.WithTimeout(ctx, max(c.wait, 5*time.Second))
	defer cancel()
	return locker.Resume(rctx, dlock.Request{Name: p.Name, Token: p.Token, Mode: p.Mode})
}

// unconfirmed is the negative control's "resumed" lease: the persisted
// fence, taken as held for -ttl from now without asking the store.
type unconfirmed struct {
	fence int64
	done  chan struct{}
}

func (u unconfirmed) Fence() int64          { return u.fence }
func (u unconfirmed) Done() <-chan struct{} { return u.done }

// unconfirmedResume is the negative control of a resume: the worker trusts
// its persisted token and fence and runs one critical section with them,
// as a "resume" that never confirms on the store would. Its acquire event
// says Op "resume" and Val the validity it believes it has (-ttl).
func unconfirmedResume(c config, lg *logger, reg *register) error {
	lg.log(wire.Event{Kind: wire.KindStart})
	p, err := readPersisted(c.resumeFile)
	if err != nil {
		return err
	}
	lg.log(wire.Event{Kind: wire.KindInvoke, Iter: 0, Mode: c.mode})
	u := unconfirmed{fence: p.Fence, done: make(chan struct{})}
	lg.log(wire.Event{Kind: wire.KindAcquire, Iter: 0, Mode: c.mode, Op: "resume", Fence: p.Fence, Val: int64(c.ttl)})
	critical(c, lg, reg, u, 0)
	lg.log(wire.Event{Kind: wire.KindRelease, Iter: 0, Fence: p.Fence})
	lg.log(wire.Event{Kind: wire.KindDone})
	return nil
}
