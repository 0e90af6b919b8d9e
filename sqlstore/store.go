// Package sqlstore is the [seckill.Store] on database/sql, written once for
// the stores that are thin on it (mysql, sqlite). Each of those opens its
// database and gives a [Dialect]: its statements where the two databases
// differ, what its driver's errors mean, and how its transactions meet
// (row locks that wait, skip and deadlock, or one writer at a time). The
// statements they agree on, and every method's logic, are here.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

// defaultLimit is how many rows the listing methods return when given no
// limit.
const defaultLimit = 100

// defaultPageLimit is how many orders VoucherOrders returns when given no
// limit: pages of a rebuild, read by the thousand.
const defaultPageLimit = 1000

// batchChunk is how many orders or ids one statement about many covers:
// few enough to stay far below the parameters a statement may have (65535
// on MySQL, 32766 on SQLite) and MySQL's max_allowed_packet, many enough
// for a batch of a few hundred to take a constant number of round trips.
const batchChunk = 500

// Store is a [seckill.Store] on one database/sql database of a [Dialect].
type Store struct {
	db      *sql.DB
	d       Dialect
	q       statements
	closing sync.Mutex // held by closeReadOnly
}

var _ seckill.Store = (*Store)(nil)

// New returns the store on db, which speaks d; closing the store closes
// db. It panics if d lacks one of its functions: a dialect is written
// once, in code.
func New(db *sql.DB, d Dialect) *Store {
	if d.Name == "" || d.Time == nil || d.Err == nil || d.IsUnique == nil || d.IsForeignKey == nil ||
		d.IsReadOnly == nil || d.Migrations == nil || d.BeginMigrate == nil {
		panic("sqlstore: incomplete dialect " + d.Name)
	}
	if d.IsDeadlock == nil {
		d.IsDeadlock = func(error) bool { return false }
	}
	for _, p := range []*func(error) bool{&d.PlaceRetry.Retryable, &d.SaveRetry.Retryable, &d.CancelRetry.Retryable} {
		if *p == nil {
			*p = func(error) bool { return false }
		}
	}
	return &Store{db: db, d: d, q: compose(d.SQL)}
}

// errorf formats an error of the store's, prefixed by its dialect's name.
func (s *Store) errorf(format string, args ...any) error {
	return fmt.Errorf(s.d.Name+": "+format, args...)
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return s.errorf("ping: %w", s.d.Err(err))
	}
	if s.d.SQL.Ping != "" {
		var n int
		if err := s.db.QueryRowContext(ctx, s.d.SQL.Ping).Scan(&n); err != nil {
			return s.errorf("ping: %w", s.d.Err(err))
		}
	}
	return nil
}

// Writable checks that the database takes writes now; see [seckill.Store].
func (s *Store) Writable(ctx context.Context) (err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, s.d.SQL.ProbeWrite, s.at(now())); err != nil {
		return s.errorf("probe a write: %w", s.d.Err(err))
	}
	return nil
}

// closeReadOnly closes the pool's idle connections (sqlrows.CloseIdle) if
// *err says the database refused a write as read-only: a connection that
// was refused may go on being refused once the database takes writes again
// (a MySQL connection still reaching a writer demoted by a failover, a
// SQLite connection that opened the file read-only), while a new one is
// not. The write methods defer it: by then the connection that was refused
// is back among the idle ones; one in use elsewhere is closed when its own
// write is refused (TestReadOnlyConnectionsClosed).
func (s *Store) closeReadOnly(ctx context.Context, err *error) {
	// One at a time: two that read the same idle count would take every
	// connection between them and wait for more (found by review). Each
	// still closes what is idle after its own connection came back.
	if s.d.IsReadOnly(*err) {
		s.closing.Lock()
		defer s.closing.Unlock()
		sqlrows.CloseIdle(ctx, s.db)
	}
}

// Close closes the connection pool; it is safe to call more than once.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return s.errorf("close: %w", err)
	}
	return nil
}

// Commit commits tx. When ctx ended after the transaction's last
// statement, database/sql has rolled it back and Commit says only
// sql.ErrTxDone: nothing was committed, and the answer is ctx's error (a
// request that took too long: 503, not a 500).
func Commit(ctx context.Context, tx *sql.Tx) error {
	err := tx.Commit()
	if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
		return fmt.Errorf("%w (the transaction was rolled back)", ctx.Err())
	}
	return err
}

// UTC is how the store keeps a time: in UTC, to the microsecond that both
// databases keep (MySQL would round the rest, MariaDB cut it).
func UTC(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// at is t as the database keeps it, bound as an argument.
func (s *Store) at(t time.Time) any { return s.d.Time(UTC(t)) }

// now is the time the store writes as a row's creation time.
func now() time.Time { return UTC(time.Now()) }

// nullTime reads a time column, NULL or not, as either database keeps it:
// a DATETIME the driver parsed (MySQL), or INTEGER microseconds since the
// Unix epoch (SQLite); in UTC.
type nullTime struct {
	Time  time.Time
	Valid bool
}

// Scan implements [sql.Scanner].
func (t *nullTime) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*t = nullTime{}
	case time.Time:
		*t = nullTime{v.UTC(), true}
	case int64:
		*t = nullTime{time.UnixMicro(v).UTC(), true}
	default:
		return fmt.Errorf("sqlstore: a time column holds a %T", v)
	}
	return nil
}
