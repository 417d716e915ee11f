package goredis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/goredis"
)

// Example: dlock over the go-redis client an application already has. It
// needs a server, so it is compiled, not run; the package examples on
// store/memory run the same calls with output.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // or redis.NewClusterClient, redis.NewFailoverClient
	defer client.Close()

	store, err := goredis.New(client)
	if err != nil {
		panic(err)
	}
	defer store.Close() // the client stays open
	locker, err := dlock.New(store, dlock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Mutex("invoice-42").Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println("fence", lease.Fence()) // pass it to the protected resource
}
