package zookeeper_test

import (
	"context"
	"log"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/zookeeper"
)

// The ZooKeeper recipe behind dlock's API: ephemeral sequential nodes,
// fences max(last + 1, clock floor), loss when the session expires.
func ExampleNew() {
	ctx := context.Background()
	s, err := zookeeper.New(ctx, []string{"127.0.0.1:2181"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close() // ends the session: every hold of s is freed at once
	l, _ := dlock.New(s)
	defer l.Close()
	err = l.Do(ctx, "compaction", func(ctx context.Context) error {
		// ctx is cancelled if the lease is lost (session expired).
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
