package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

func ExampleElection_Campaign() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New(), dlock.WithTTL(10*time.Second))
	defer locker.Close()

	a := locker.Election("scheduler")
	lead, _ := a.Campaign(ctx, "host-a:8080") // blocks until host-a leads
	ld, _ := a.Leader(ctx)
	fmt.Println("leader:", ld.Value, "term is the fence:", ld.Term == lead.Fence())

	b := locker.Election("scheduler")
	elected := make(chan *dlock.Lease)
	go func() {
		l, _ := b.Campaign(ctx, "host-b:8080") // a standby: waits
		elected <- l
	}()
	a.Resign(ctx) // host-b is elected at once
	next := <-elected
	fmt.Println("next term is higher:", next.Fence() > lead.Fence())
	b.Resign(ctx)
	// Output:
	// leader: host-a:8080 term is the fence: true
	// next term is higher: true
}

func ExampleElection_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locker, _ := dlock.New(memory.New())
	defer locker.Close()

	e := locker.Election("primary")
	changes := e.Observe(ctx)
	fmt.Printf("leading: %q\n", (<-changes).Value) // nobody yet

	e.Campaign(ctx, "db-1")
	fmt.Printf("leading: %q\n", (<-changes).Value)
	e.Resign(ctx)
	fmt.Printf("leading: %q\n", (<-changes).Value)
	// Output:
	// leading: ""
	// leading: "db-1"
	// leading: ""
}

func ExampleLocker_Multi() {
	ctx := context.Background()
	locker, _ := dlock.New(memory.New())
	defer locker.Close()

	// Move money between two accounts: hold both or neither.
	transfer, err := locker.Multi([]string{"account:42", "account:7"}).Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("holding:", transfer.Names())

	_, err = locker.Multi([]string{"account:7", "account:99"}).TryLock(ctx)
	var locked *dlock.LockedError
	if errors.As(err, &locked) {
		fmt.Println("overlapping refused on:", locked.Name)
	}
	transfer.Release(ctx)
	// Output:
	// holding: [account:42 account:7]
	// overlapping refused on: account:7
}

func ExampleWithLockDelay() {
	ctx := context.Background()
	store := memory.New()
	// A holder that stalls past its lease keeps the name a minute more.
	locker, _ := dlock.New(store, dlock.WithTTL(200*time.Millisecond), dlock.WithLockDelay(time.Minute))
	defer locker.Close()
	other, _ := dlock.New(store)
	defer other.Close()

	lease, _ := locker.Mutex("ledger").TryLock(ctx)
	<-lease.Done() // not renewed: lost after ~200ms
	_, err := other.Mutex("ledger").TryLock(ctx)
	fmt.Println("right after the loss:", err != nil)

	clean, _ := locker.Mutex("journal").TryLock(ctx)
	clean.Release(ctx) // a clean release frees the name at once
	_, err = other.Mutex("journal").TryLock(ctx)
	fmt.Println("after a release:", err)
	// Output:
	// right after the loss: true
	// after a release: <nil>
}
