package dlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// A lease handed to an owner elsewhere (by its token) outlives the Locker
// that granted it: Close ends it for the Locker, and the store keeps the
// hold until the owner releases it.
func ExampleWithOwnerReleaseOnly() {
	ctx := context.Background()
	mem := memory.New()
	granter, _ := dlock.New(mem, dlock.WithOwnerReleaseOnly())
	lease, _ := granter.Mutex("job").TryLock(ctx)
	token := lease.Token() // sent to the owner
	granter.Close()

	other, _ := dlock.New(mem)
	defer other.Close()
	_, err := other.Mutex("job").TryLock(ctx)
	fmt.Println("after Close:", errors.Is(err, dlock.ErrLocked))

	// The owner releases it by its token.
	err = mem.Release(ctx, dlock.Request{Name: "job", Token: token, Mode: dlock.ModeMutex})
	fmt.Println("owner's release:", err)
	_, err = other.Mutex("job").TryLock(ctx)
	fmt.Println("then:", err)
	// Output:
	// after Close: true
	// owner's release: <nil>
	// then: <nil>
}

// Forget ends a lease for its Locker when its owner served it elsewhere:
// no store call, and the hold stays the owner's.
func ExampleLease_Forget() {
	ctx := context.Background()
	mem := memory.New()
	locker, _ := dlock.New(mem, dlock.WithOwnerReleaseOnly())
	defer locker.Close()
	lease, _ := locker.Mutex("job").TryLock(ctx)

	fmt.Println("Forget:", lease.Forget())
	st, _ := mem.State(ctx, "job")
	fmt.Println("still held on the store:", st.Holders == 1)
	// Output:
	// Forget: <nil>
	// still held on the store: true
}
