package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
)

// A Locker over a Redlock of three nodes. In production each node is a
// valkey.Store on its own independent server.
func ExampleNew() {
	nodes := []dlock.Store{memory.New(), memory.New(), memory.New()}
	store, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	locker, err := dlock.New(store)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Mutex("report").TryLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held on a majority (%d of %d nodes), fenced: %v\n", store.Quorum(), store.Nodes(), lease.Fence() > 0)

	_, err = locker.Mutex("report").TryLock(ctx)
	fmt.Println("second TryLock:", errors.Is(err, dlock.ErrLocked))
	lease.Release(ctx)
	// Output:
	// held on a majority (2 of 3 nodes), fenced: true
	// second TryLock: true
}
