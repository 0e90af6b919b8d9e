// Package mysql is the [seckill.Store] on MySQL or MariaDB (InnoDB), through
// github.com/go-sql-driver/mysql and database/sql. The store is
// [sqlstore.Store]; this package opens the database and gives its dialect:
// the SQL that is MySQL's (row locks, index hints, upserts), what the
// server's errors mean, the retries of transactions that deadlocked, and
// the migrations.
//
// Times are stored as DATETIME(6) in UTC: the connection parses DATETIME
// values as UTC times, and the store writes times in UTC to the
// microsecond, the precision the columns keep.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/sqlstore"
)

// DefaultMaxConns is the size of the connection pool when Open is given
// none.
const DefaultMaxConns = 20

// sqlStore is the shared store, embedded under an unexported name so that
// Store has its methods but no exported field.
type sqlStore = sqlstore.Store

// Store is a [seckill.Store] on one MySQL or MariaDB database. Its methods
// are those of [sqlstore.Store], on this package's dialect.
type Store struct {
	*sqlStore
	db *sql.DB // the shared store's pool, which the tests read the tables with
}

var _ seckill.Store = (*Store)(nil)

// Open connects to the database at rawURL,
// mysql://user:password@host:port/database?param=value, with a pool of at
// most maxConns connections (DefaultMaxConns when maxConns <= 0), and
// checks that it answers. Query parameters go to the driver (timeout, tls,
// system variables…); interpolateParams defaults to true, so that a
// statement with arguments takes one round trip instead of three, and
// parseTime and loc are always true and UTC, which the store relies on.
func Open(ctx context.Context, rawURL string, maxConns int) (*Store, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	connector, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: open %s: %w", redact(rawURL), err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	// So that connections follow a failover after a while.
	db.SetConnMaxLifetime(time.Hour)
	// Below the session's wait_timeout (parseURL): the pool drops an idle
	// connection before the server does.
	db.SetConnMaxIdleTime(sessionIdle / 2)
	s := &Store{sqlStore: sqlstore.New(db, dialect), db: db}
	if err := s.Ping(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: open %s: %w", redact(rawURL), err)
	}
	return s, nil
}

// sessionIdle is how long the server keeps a silent session (and its
// transaction's locks): see parseURL.
const sessionIdle = 5 * time.Second

// parseURL turns a mysql:// URL into the driver's configuration.
func parseURL(rawURL string) (*mysqldriver.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// The error would quote the URL, password and all.
		return nil, errors.New("mysql: URL: malformed")
	}
	if u.Scheme != "mysql" {
		// Not a URL of ours: it may not even hide its password as one does.
		return nil, fmt.Errorf("mysql: URL scheme %q: want mysql", u.Scheme)
	}
	if u.Opaque != "" || u.Fragment != "" {
		return nil, fmt.Errorf("mysql: URL %s:…: want mysql://user:password@host:port/database", u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("mysql: URL %s: no host", u.Redacted())
	}
	port := u.Port()
	if port == "" {
		port = "3306"
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	if dbName == "" || strings.Contains(dbName, "/") {
		return nil, fmt.Errorf("mysql: URL %s: the path must name one database", u.Redacted())
	}
	// The driver parses its own parameters; ours come first so that the
	// URL's replace them.
	//
	// wait_timeout: the server ends a session silent for sessionIdle and
	// rolls back its transaction. Otherwise an instance cut off from the
	// database (a partition, a paused process) inside SaveOrders keeps the
	// voucher's row lock (SELECT … FOR UPDATE) until the server notices,
	// hours later, and no instance can write the orders it reclaims from it
	// (TestPartitionedInstance). Keep it below --claim-lease.
	params := "interpolateParams=true&wait_timeout=" + strconv.Itoa(int(sessionIdle/time.Second))
	if u.RawQuery != "" {
		params += "&" + u.RawQuery
	}
	cfg, err := mysqldriver.ParseDSN("/?" + params)
	if err != nil {
		return nil, fmt.Errorf("mysql: URL %s: %w", u.Redacted(), err)
	}
	cfg.Net = "tcp"
	cfg.Addr = net.JoinHostPort(host, port)
	cfg.DBName = dbName
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	return cfg, nil
}

// redact returns rawURL without its password, for messages.
func redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Redacted()
	}
	return "(malformed URL)"
}

// probeWriteSQL is Writable's write, committed: write_probe's one row.
const probeWriteSQL = `INSERT INTO write_probe (id, probed_at) VALUES (1, ?)
ON DUPLICATE KEY UPDATE probed_at = VALUES(probed_at)`

// utc is how the store writes a time: in UTC, to the microsecond that
// DATETIME(6) keeps (MySQL would round the rest, MariaDB cut it).
func utc(t time.Time) time.Time { return sqlstore.UTC(t) }

// dialect is MySQL's and MariaDB's, for the shared store.
var dialect = sqlstore.Dialect{
	Name:         "mysql",
	Time:         func(t time.Time) any { return utc(t) },
	Err:          dbErr,
	IsUnique:     isUniqueViolation,
	IsForeignKey: isForeignKeyViolation,
	IsReadOnly:   isReadOnly,
	IsDeadlock:   isDeadlock,
	PlaceRetry:   placeRetry,
	SaveRetry:    saveRetry,
	SaveNewFirst: true,
	CancelRetry:  cancelRetry,
	LockTx:       cancelTx,
	SQL: sqlstore.Statements{
		ProbeWrite: probeWriteSQL,

		OrderColumns:        orderColumns,
		FromOrders:          fromOrders,
		SelectVoucherOrders: selectVoucherOrdersSQL,

		OrderExists:       orderExistsSQL,
		InsertFailedOrder: insertFailedOrderSQL,

		PlaceOrder:     placeOrderSQL,
		TakeOne:        takeOneSQL,
		SelectNotTaken: selectNotTakenSQL,

		LockVouchers:         lockVouchersSQL,
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
