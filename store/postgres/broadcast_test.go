package postgres_test

import (
	"testing"

	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/dlock-dev/dlock/storetest"
)

func TestBroadcast(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Broadcast(t, newStore(t, srv.URL()), newStore(t, srv.URL()))
}
