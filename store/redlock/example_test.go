package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
)

// A Locker over a Redlock of three nodes. In production each node is a
// valkey.Store on its own independent server.
func ExampleNew() {
	nodes := []store.Store{memory.New(), memory.New(), memory.New()}
	st, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	locker, err := dlock.New(st)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Mutex("report").TryLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held on a majority (%d of %d nodes), fenced: %v\n", st.Quorum(), st.Nodes(), lease.Fence() > 0)

	_, err = locker.Mutex("report").TryLock(ctx)
	fmt.Println("second TryLock:", errors.Is(err, dlock.ErrLocked))
	lease.Release(ctx)
	// Output:
	// held on a majority (2 of 3 nodes), fenced: true
	// second TryLock: true
}

// A leader election over a Redlock of three nodes: the term is the fence
// settled on the nodes, and Leader reports what a majority of them agree
// on.
func ExampleStore_Leader() {
	nodes := []store.Store{memory.New(), memory.New(), memory.New()}
	st, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	locker, err := dlock.New(st)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	e := locker.Election("scheduler")
	lease, err := e.Campaign(ctx, "host-a:8080")
	if err != nil {
		log.Fatal(err)
	}
	ld, err := st.Leader(ctx, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader %s, term is the lease's fence: %v\n", ld.Value, ld.Term == lease.Fence())
	e.Resign(ctx)
	_, err = st.Leader(ctx, "scheduler")
	fmt.Println("after Resign:", errors.Is(err, dlock.ErrNoLeader))
	// Output:
	// leader host-a:8080, term is the lease's fence: true
	// after Resign: true
}
