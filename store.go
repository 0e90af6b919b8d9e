package seckill

import "context"

// Store is the relational database: MySQL/MariaDB, PostgreSQL or SQLite.
// Every backend passes the same conformance suite (package storetest).
type Store interface {
	VoucherStore
	UserStore
	OrderStore
	LifecycleStore

	// Migrate applies the backend's embedded migrations that the database
	// has not seen yet. Concurrent calls from several processes are safe.
	Migrate(ctx context.Context) error
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Writable checks that the database takes writes now: it writes and
	// commits one row of its own (write_probe), so that a refusal at
	// commit fails it too. A server that refuses writes (a standby, a
	// read-only session, a replication group out of quorum) fails it.
	// Workers ask it before they blame orders for a failure of no known
	// kind (docs/design/persistence.md, What counts as a delivery).
	Writable(ctx context.Context) error
	// Close releases the connection pool.
	Close() error
}
