package valkey_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

// ExampleDial takes a lock on a Valkey or Redis server (a cluster: list its
// seeds, "redis://h1:7000,h2:7001,h3:7002") and uses the fence to protect
// the resource. It needs a server, so it is not run.
func ExampleDial() {
	ctx := context.Background()
	store, err := valkey.Dial(ctx, "redis://localhost:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	locker, err := dlock.New(store, dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.Mutex("reports/daily").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Send lease.Fence() with every write; the resource rejects writes whose
	// fence is lower than one it has seen.
	fmt.Println("holding reports/daily with fence", lease.Fence())
}
