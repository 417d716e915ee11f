package postgres_test

import (
	"context"
	"log"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/postgres"
)

// A lock on the lease table, whose fence guards the protected row.
func ExampleNew() {
	ctx := context.Background()
	s, err := postgres.New(ctx, "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	l, err := dlock.New(s)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	err = l.Do(ctx, "inventory-42", func(ctx context.Context) error {
		lease := dlock.LeaseFromContext(ctx, "inventory-42")
		_, err := postgres.FencedUpdate(ctx, s.Pool(), "inventory_item",
			"quantity = quantity - 1", "id = $2", lease.Fence(), 42)
		return err // postgres.ErrStaleFence if a later holder wrote first
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Locks shared with code that already calls pg_advisory_lock(hashtext(name)).
func ExampleNewAdvisory() {
	ctx := context.Background()
	s, err := postgres.NewAdvisory(ctx, "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	l, _ := dlock.New(s)
	defer l.Close()
	lease, err := l.Mutex("resource-1").TryLock(ctx)
	if err != nil {
		log.Fatal(err) // *dlock.LockedError while another session holds it
	}
	defer lease.Release(ctx)
}
