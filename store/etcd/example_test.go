package etcd_test

import (
	"context"
	"log"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/etcd"
)

// A fair lock on etcd: waiters queue by create revision, each watching only
// its predecessor; the fence is the grant's revision.
func ExampleNew() {
	ctx := context.Background()
	s, err := etcd.New(ctx, []string{"127.0.0.1:2379"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	l, _ := dlock.New(s, dlock.WithAutoRenew())
	defer l.Close()
	lease, err := l.Fair("nightly-report").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	select {
	case <-lease.Done(): // the etcd lease expired: stop, someone else may hold it
	default:
		log.Printf("holding with fence %d", lease.Fence())
	}
}
