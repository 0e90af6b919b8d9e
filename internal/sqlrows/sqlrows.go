// Package sqlrows is the database/sql plumbing of the store on it
// (sqlstore, which mysql and sqlite are): reading a query's rows into
// values, writing the placeholders of a statement about many rows, closing
// idle connections, adopting a user stored under a legacy phone. The SQL,
// and what a driver's errors mean, stay with the store and its dialects:
// errors come back as the driver returned them, for them to interpret.
package sqlrows

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"time"

	seckill "github.com/seckill/seckill"
)

// Querier is what *sql.DB, *sql.Conn and *sql.Tx share, for code that runs
// in a transaction or out of one.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Scanner is one row to read: a *sql.Row, or *sql.Rows at a row.
type Scanner interface {
	Scan(dest ...any) error
}

// Query runs query and returns its rows, each read by scan; none is a nil
// slice.
func Query[T any](ctx context.Context, q Querier, scan func(Scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var vs []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return vs, nil
}

// QueryMap runs query, whose rows are each a key and its value, and adds
// them to m: a later row of a key replaces an earlier one.
func QueryMap[K comparable, V any](ctx context.Context, q Querier, m map[K]V, query string, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k K
			v V
		)
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		m[k] = v
	}
	return rows.Err()
}

// Scalar reads a row of one column, for [Query].
func Scalar[T any](row Scanner) (T, error) {
	var v T
	err := row.Scan(&v)
	return v, err
}

// Placeholders returns n copies of group joined by commas: the parameters
// of a statement about n rows, such as "(?, ?), (?, ?)" for group "(?, ?)"
// and n 2.
func Placeholders(group string, n int) string {
	var b strings.Builder
	b.Grow(n * (len(group) + 2))
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(group)
	}
	return b.String()
}

// CloseIdle closes the connections db holds idle now: for a store whose
// connections may all reach a server that refuses writes on them (a writer
// demoted by a failover), so that new ones reach the new writer. It takes
// each out of the pool and has database/sql discard it (Conn.Raw with
// driver.ErrBadConn); a connection in use is not closed. (Setting the idle
// limit to zero and back closes them too, but database/sql's
// SetMaxIdleConns reads the connections it closes after unlocking the
// pool, a data race with a connection returned meanwhile.)
func CloseIdle(ctx context.Context, db *sql.DB) {
	// Bounded: a connection returned after Stats was read is taken in
	// place of one taken meanwhile, and none is waited for long. One call
	// at a time per db (the caller's).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 100*time.Millisecond)
	defer cancel()
	idle := db.Stats().Idle
	conns := make([]*sql.Conn, 0, idle)
	for range idle {
		c, err := db.Conn(ctx)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Raw(func(any) error { return driver.ErrBadConn })
		c.Close()
	}
}

// AdoptLegacyUser makes the oldest user stored under one of the legacy
// forms of phone the phone's user, and returns it; nil when there is none.
// The rewrite is conditional, and the phone unique: of concurrent calls,
// one rewrites and the others read the phone's user. scan reads a user row
// of selectByPhone (its one argument the phone); adopt rewrites a phone
// (arguments: the new phone, the user's id, the old phone); isUnique tells
// the phone's unique key refusing it.
func AdoptLegacyUser(ctx context.Context, db *sql.DB, scan func(*sql.Row) (*seckill.User, error),
	selectByPhone, adopt string, isUnique func(error) bool, phone string, legacy []string) (*seckill.User, error) {
	var old *seckill.User
	for _, l := range legacy {
		u, err := scan(db.QueryRowContext(ctx, selectByPhone, l))
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if old == nil || u.ID < old.ID {
			old = u
		}
	}
	if old == nil {
		return nil, nil
	}
	res, err := db.ExecContext(ctx, adopt, phone, old.ID, old.Phone)
	switch {
	case err == nil:
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		if n == 1 {
			old.Phone = phone
			return old, nil
		}
	case !isUnique(err):
		return nil, err
	}
	// Another call took the phone first: it rewrote the same row, or made
	// a user of the phone; either is the phone's user.
	u, err := scan(db.QueryRowContext(ctx, selectByPhone, phone))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return u, err
}
