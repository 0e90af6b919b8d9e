// Package sqlite is the [seckill.Store] on SQLite, through the pure-Go
// driver modernc.org/sqlite: the embedded default, for trying the service
// without a database server. The store is [sqlstore.Store]; this package
// opens the database file and gives its dialect: the SQL that is SQLite's,
// what its errors mean, and the migrations.
//
// SQLite has one writer at a time. Every connection waits for the write lock
// (busy_timeout) instead of failing, and every transaction takes that lock
// when it begins (_txlock=immediate): a transaction that read first and then
// tried to write could otherwise fail at once with SQLITE_BUSY, since
// waiting could deadlock. WAL lets readers go on while one writes.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/sqlstore"
)

// DefaultMaxConns is the size of the connection pool when Open is given
// none. Only one of them writes at a time; the others read.
const DefaultMaxConns = 20

// busyTimeout is how long a statement waits for another connection's write
// lock before it fails with SQLITE_BUSY. Writers hold it for milliseconds.
const busyTimeout = 5 * time.Second

// sqlStore is the shared store, embedded under an unexported name so that
// Store has its methods but no exported field.
type sqlStore = sqlstore.Store

// Store is a [seckill.Store] on one SQLite database file. Its methods are
// those of [sqlstore.Store], on this package's dialect.
type Store struct {
	*sqlStore
	db *sql.DB // the shared store's pool, which the tests read the tables with
}

var _ seckill.Store = (*Store)(nil)

// Open opens the SQLite database at rawURL, sqlite:///abs/path.db or
// sqlite://rel/path.db (relative to the working directory), creating the
// file but not its directory, with a pool of at most maxConns connections
// (DefaultMaxConns when maxConns <= 0), and checks that it can be used.
// Query parameters of the URL go to the driver after the store's own
// (WAL, busy_timeout, foreign keys, _txlock=immediate).
func Open(ctx context.Context, rawURL string, maxConns int) (*Store, error) {
	dsn, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", rawURL, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	s := &Store{sqlStore: sqlstore.New(db, dialect), db: db}
	if err := s.Ping(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", rawURL, err)
	}
	return s, nil
}

// parseURL turns a sqlite:// URL into the driver's data source name: an
// absolute file path, so that a later change of working directory does not
// move the database, and the connection parameters.
func parseURL(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// The error would quote the URL, password and all.
		return "", errors.New("sqlite: URL: malformed")
	}
	if u.Scheme != "sqlite" {
		// Not a URL of ours: it may not even hide its password as one does.
		return "", fmt.Errorf("sqlite: URL scheme %q: want sqlite", u.Scheme)
	}
	if u.Opaque != "" || u.User != nil || u.Fragment != "" {
		return "", fmt.Errorf("sqlite: URL %s:…: want sqlite:///abs/path.db or sqlite://rel/path.db", u.Scheme)
	}
	path := u.Host + u.Path
	switch {
	case path == "" || path == "/":
		return "", fmt.Errorf("sqlite: URL %q: no file path", rawURL)
	case strings.HasSuffix(path, "/"):
		return "", fmt.Errorf("sqlite: URL %q: the path names a directory", rawURL)
	case strings.ContainsAny(path, "?\x00"):
		// The driver cuts its parameters off at the first '?'.
		return "", fmt.Errorf("sqlite: URL %q: the path must not hold '?' or NUL", rawURL)
	}
	if path, err = filepath.Abs(path); err != nil {
		return "", fmt.Errorf("sqlite: URL %q: %w", rawURL, err)
	}
	params := url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
			"journal_mode(WAL)",
			"foreign_keys(1)",
		},
		"_txlock": {"immediate"},
	}
	for k, vs := range u.Query() {
		params[k] = append(params[k], vs...)
	}
	return path + "?" + params.Encode(), nil
}

// probeWriteSQL is Writable's write, committed: write_probe's one row.
const probeWriteSQL = `INSERT INTO write_probe (id, probed_at) VALUES (1, ?)
ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at`

// micros is how a time is stored: microseconds since the Unix epoch.
func micros(t time.Time) int64 { return t.UnixMicro() }

// dialect is SQLite's, for the shared store.
var dialect = sqlstore.Dialect{
	Name:         "sqlite",
	Time:         func(t time.Time) any { return micros(t) },
	Err:          dbErr,
	IsUnique:     isUniqueViolation,
	IsForeignKey: isForeignKeyViolation,
	IsReadOnly:   isReadOnly,
	SaveRetry:    saveRetry,
	SweepChunk:   500, // a sweep's ids, well within SQLite's 32766 parameters
	SQL: sqlstore.Statements{
		// Ping alone does not touch the file; a query does.
		Ping:       `SELECT count(*) FROM sqlite_schema`,
		ProbeWrite: probeWriteSQL,

		OrderColumns:        orderColumns,
		FromOrders:          ` FROM orders o`,
		SelectVoucherOrders: selectVoucherOrdersSQL,

		InsertFailedOrder: insertFailedOrderSQL,

		PlaceOrder:     placeOrderSQL,
		TakeOne:        takeOneSQL,
		SelectNotTaken: selectNotTakenSQL,

		SelectClashingOrders: selectClashingOrdersSQL,

		SelectDue:              selectDueSQL,
		InsertPaymentEvent:     insertPaymentEventSQL,
		SelectDeadlineVouchers: selectDeadlineVouchersSQL,
		CountLifecycle:         countLifecycleSQL,

		SelectDueRefunds:     selectDueRefundsSQL,
		SelectDueRefund:      selectDueRefundSQL,
		CountRefundsWaiting:  countRefundsWaitingSQL,
		SelectRefundsWaiting: selectRefundsWaitingSQL,

		EndVoucher: endVoucherSQL,

		CreateMigrationsTable: createMigrationsTableSQL,
		InsertVersion:         insertVersionSQL,
		MigrationsTableExists: migrationsTableExistsSQL,
	},
	Migrations:   migrationFiles,
	BeginMigrate: beginMigrate,
}
