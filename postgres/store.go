// Package postgres is the [seckill.Store] on PostgreSQL, through pgx/v5
// natively (not database/sql).
//
// The tables live in the first schema of the connection's search_path, so
// that one database can hold several stores (the tests use a schema each).
// Times are TIMESTAMPTZ, read back in UTC.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	seckill "github.com/seckill/seckill"
)

// DefaultMaxConns is the size of the connection pool when Open is given
// none.
const DefaultMaxConns = 20

// defaultLimit is how many rows the listing methods return when given no
// limit.
const defaultLimit = 100

// defaultPageLimit is how many orders VoucherOrders returns when given no
// limit: pages of a rebuild, read by the thousand.
const defaultPageLimit = 1000

// Store is a [seckill.Store] on one PostgreSQL database (and schema).
type Store struct {
	pool *pgxpool.Pool
}

var _ seckill.Store = (*Store)(nil)

// Open connects to the database at rawURL, a libpq URL
// postgres://user:password@host:port/database?param=value (or
// postgresql://), with a pool of at most maxConns connections
// (DefaultMaxConns when maxConns <= 0), and checks that it answers. Query
// parameters are pgx's and libpq's (sslmode, connect_timeout…); any other,
// such as search_path, is set on each connection as a run-time parameter.
func Open(ctx context.Context, rawURL string, maxConns int) (*Store, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", redact(rawURL), err)
	}
	s := &Store{pool: pool}
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", redact(rawURL), err)
	}
	return s, nil
}

// parseURL checks that rawURL is a postgres:// or postgresql:// URL and
// turns it into pgx's configuration.
func parseURL(rawURL string) (*pgxpool.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// The error would quote the URL, password and all.
		return nil, errors.New("postgres: URL: malformed")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		// Not a URL of ours: it may not even hide its password as one does.
		return nil, fmt.Errorf("postgres: URL scheme %q: want postgres or postgresql", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, fmt.Errorf("postgres: URL %s:…: want postgres://user:password@host:port/database", u.Scheme)
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		// pgx's parse errors hide the password.
		return nil, fmt.Errorf("postgres: URL %s: %w", u.Redacted(), err)
	}
	// The server ends a session idle inside a transaction for 5s, rolling
	// it back: an instance cut off from the database (a partition, a
	// paused process) inside SaveOrders would otherwise hold the voucher's
	// row lock until the server notices, and no instance could write the
	// orders it reclaims from it. Keep it below --claim-lease; the URL's
	// own setting wins.
	if _, ok := cfg.ConnConfig.RuntimeParams[idleParam]; !ok {
		cfg.ConnConfig.RuntimeParams[idleParam] = "5s"
	}
	return cfg, nil
}

// idleParam is the session setting that bounds an idle transaction.
const idleParam = "idle_in_transaction_session_timeout"

// redact returns rawURL without its password, for messages.
func redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	return "(malformed URL)"
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	err := s.with(ctx, func(conn *pgx.Conn) error { return conn.Ping(ctx) })
	if err != nil {
		return fmt.Errorf("postgres: ping: %w", dbErr(err))
	}
	return nil
}

// probeWriteSQL is Writable's write, committed: write_probe's one row.
const probeWriteSQL = `INSERT INTO write_probe (id, probed_at) VALUES (1, now())
ON CONFLICT (id) DO UPDATE SET probed_at = EXCLUDED.probed_at`

// Writable checks that the database takes writes now; see [seckill.Store].
func (s *Store) Writable(ctx context.Context) error {
	err := s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, probeWriteSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: probe a write: %w", dbErr(err))
	}
	return nil
}

// Close closes the connection pool, waiting for connections in use to be
// returned; it is safe to call more than once.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// with runs fn on a connection of the pool held for the call. A connection
// that fn leaves broken or inside a transaction is closed, not reused.
//
// If the server refused a write as read-only, every connection of the pool
// is closed, this one when it is returned: after a failover the pool's
// connections may reach a writer that was demoted, which refuses writes on
// them until they are closed, while a new connection reaches the new
// writer (TestReadOnlyConnectionsClosed).
func (s *Store) with(ctx context.Context, fn func(conn *pgx.Conn) error) error {
	err := s.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return fn(c.Conn()) })
	if isReadOnly(err) {
		s.pool.Reset()
	}
	return err
}

// utc is how the store writes a time: in UTC, to the microsecond that
// TIMESTAMPTZ keeps.
func utc(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// now is the time the store writes as a row's creation time.
func now() time.Time { return utc(time.Now()) }
