// Package sqlrows is the database/sql plumbing that the stores on it
// (mysql, sqlite) share: reading a query's rows into values, and writing
// the placeholders of a statement about many rows. The SQL, and what a
// driver's errors mean, stay with each store: errors come back as the
// driver returned them, for the store to interpret.
package sqlrows

import (
	"context"
	"database/sql"
	"strings"
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

// CloseIdle closes db's idle connections now and keeps up to maxIdle from
// then on: for a store whose connections may all reach a server that
// refuses writes on them (a writer demoted by a failover), so that new
// ones reach the new writer. A connection in use is not closed.
func CloseIdle(db *sql.DB, maxIdle int) {
	db.SetMaxIdleConns(0) // closes every idle connection
	db.SetMaxIdleConns(maxIdle)
}
