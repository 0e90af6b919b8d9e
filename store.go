package seckill

import "context"

// Store is the relational database: MySQL/MariaDB, PostgreSQL or SQLite.
// Every backend passes the same conformance suite (package storetest).
type Store interface {
	VoucherStore
	UserStore
	OrderStore

	// Migrate applies the backend's embedded migrations that the database
	// has not seen yet. Concurrent calls from several processes are safe.
	Migrate(ctx context.Context) error
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Writable checks that the database takes writes now: a write that
	// changes nothing, rolled back. A server that refuses writes (a
	// standby, a read-only session) fails it. Workers ask it before they
	// blame orders for a failure of no known kind (docs/design.md, Dead
	// letters).
	Writable(ctx context.Context) error
	// Close releases the connection pool.
	Close() error
}
