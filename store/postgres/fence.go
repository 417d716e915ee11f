package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrStaleFence reports that a fenced write was refused: the row has
// already been written under a later fence, so the writer's lease has
// been superseded (seed 004, "the kitchen must check the ticket").
var ErrStaleFence = errors.New("dlock: stale fence")

// Execer is what [FencedUpdate] runs on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// FencedUpdate is the conditional write that makes a lock safe when its
// holder pauses past its lease (seed 004): it runs
//
//	UPDATE table SET <set>, fence_token = $1
//	WHERE (<where>) AND fence_token <= $1
//
// with fence as $1 and args as $2, $3, ... of set and where, and returns the
// number of rows updated. The protected table needs a column
// `fence_token bigint NOT NULL DEFAULT 0`. When where matches rows but
// none was updated, it returns [ErrStaleFence]: a later lease has written
// them. (It lives in store/postgres until the module root has its `fence`
// package.)
//
// Seed 004 writes `fence_token < $1`, which lets each fence write a row
// once. FencedUpdate accepts an equal fence, so one lease may write the same
// row many times; a stale holder is still refused, because every later
// exclusive grant has a higher fence. (Readers of a read-write lock share a
// fence; they must not write.)
//
// table is quoted as an identifier (schema.table is split at the dot); set
// and where are SQL written by the programmer, never user input.
//
//	n, err := postgres.FencedUpdate(ctx, pool, "inventory_item",
//		"quantity = quantity - 1", "id = $2", lease.Fence(), itemID)
func FencedUpdate(ctx context.Context, db Execer, table, set, where string, fence int64, args ...any) (int64, error) {
	t := pgx.Identifier(strings.Split(table, ".")).Sanitize()
	q := fmt.Sprintf("UPDATE %s SET %s, fence_token = $1 WHERE (%s) AND fence_token <= $1", t, set, where)
	tag, err := db.Exec(ctx, q, append([]any{fence}, args...)...)
	if err != nil {
		return 0, err
	}
	if n := tag.RowsAffected(); n > 0 {
		return n, nil
	}
	// Nothing updated: a stale fence, or no such row? where may use $2...
	// only, so $1 stays bound (and unused) to keep the numbering.
	var exists bool
	err = db.QueryRow(ctx, fmt.Sprintf("SELECT $1::bigint IS NOT NULL AND EXISTS (SELECT 1 FROM %s WHERE %s)", t, where), append([]any{fence}, args...)...).Scan(&exists)
	if err != nil {
		return 0, err
	}
	if exists {
		return 0, ErrStaleFence
	}
	return 0, nil
}
