package sqlstore

import (
	"context"
	"database/sql"
	"io/fs"
	"time"

	"github.com/seckill/seckill/internal/retry"
	"github.com/seckill/seckill/internal/sqlrows"
)

// Dialect is what a database brings to the [Store]. Arguments are bound in
// the order the shared code passes them, which is each statement's order
// of '?' in MySQL; a SQLite statement may reorder or leave out arguments
// with ?NNN.
type Dialect struct {
	// Name prefixes the store's errors: "mysql", "sqlite".
	Name string
	// Time is a time as the database keeps it, bound as an argument: a
	// time.Time (DATETIME) or microseconds since the epoch (INTEGER). It
	// is given times in UTC, to the microsecond.
	Time func(time.Time) any

	// Err marks a driver's error with the domain error it stands for
	// (seckill.ErrTransient, seckill.ErrInvalidArgument), keeping it in
	// the chain.
	Err func(error) error
	// IsUnique reports a duplicate primary or unique key, IsForeignKey a
	// reference to a missing row, IsReadOnly a write the database refused
	// as read-only (after which the store closes its idle connections).
	IsUnique, IsForeignKey, IsReadOnly func(error) bool
	// IsDeadlock reports the transaction chosen as a deadlock's victim,
	// which rolled it back whole; nil: never.
	IsDeadlock func(error) bool

	// PlaceRetry, SaveRetry and CancelRetry are when PlaceOrder, the
	// sorting transaction of SaveOrders, and the cancellations (CancelOrder,
	// CancelUnpaid, CancelDue) run their transaction again: when a
	// concurrent one got in its way. Zero: never.
	PlaceRetry, SaveRetry, CancelRetry retry.Policy
	// LockTx is the options of the transactions that lock the rows they
	// change (cancellations, sweeps, refund claims).
	LockTx *sql.TxOptions
	// SaveNewFirst has SaveOrders first take a batch for new and write it
	// without looking it up (Store.saveNew), and sort it out only if that
	// fails.
	SaveNewFirst bool
	// SweepChunk is how many orders one statement of CancelDue cancels;
	// 0: all it read, in one.
	SweepChunk int

	// SQL is the dialect's statements.
	SQL Statements

	// Migrations holds the numbered migrations, in migrations/*.sql.
	Migrations fs.FS
	// BeginMigrate starts a run of Migrate, kept apart from any other
	// process's: it returns where the run's statements go (a connection
	// holding a lock, a transaction) and end, which finishes the run given
	// its error (a commit, a release), and returns that error joined with
	// its own.
	BeginMigrate func(ctx context.Context, db *sql.DB) (q sqlrows.Querier, end func(error) error, err error)
}

// Statements are a dialect's SQL where the databases differ; why each is
// written as it is, is said where the dialect defines it. The comments
// here give the arguments the store binds, in order.
type Statements struct {
	// Ping, if set, is read after a ping (count a table's rows): it reaches
	// the database where the ping does not.
	Ping string
	// ProbeWrite writes write_probe's one row; its argument is now.
	ProbeWrite string

	// OrderColumns are an order's columns of orders o, its voucher's
	// pay_within_seconds among them (scanOrder); FromOrders what they are
	// read from, starting " FROM orders o".
	OrderColumns, FromOrders string
	// Arguments: voucher, after id, limit.
	SelectVoucherOrders string

	// OrderExists, if set, is read before InsertFailedOrder: whether an
	// order of the id (the argument) is created. Arguments of
	// InsertFailedOrder: id, user, voucher, reason, created, failed at.
	OrderExists, InsertFailedOrder string

	// Arguments: id, user, created, written, voucher.
	PlaceOrder string
	// Arguments: voucher, now.
	TakeOne string
	// Argument: voucher; it reads end_time and paused.
	SelectNotTaken string

	// LockVouchers, if set, locks a batch's vouchers (one '?' each) and
	// reads their stock before SaveOrders looks its orders up.
	LockVouchers string
	// %[1]s is one '?' per order (the ids), %[2]s one '(?, ?)' per order
	// (user, voucher).
	SelectClashingOrders string

	// Arguments: pay_within_seconds, voucher, before, started before,
	// limit.
	SelectDue string
	// Arguments: event, order, at; a replay changes no row or fails as
	// unique.
	InsertPaymentEvent     string
	SelectDeadlineVouchers string
	// Argument: voucher.
	CountLifecycle string

	// Arguments: now, limit.
	SelectDueRefunds string
	// Arguments: order, now.
	SelectDueRefund                           string
	CountRefundsWaiting, SelectRefundsWaiting string

	// Arguments: at, at, voucher.
	EndVoucher string

	// CreateMigrationsTable, InsertVersion (version, name, applied at)
	// and MigrationsTableExists (a count) are schema_migrations'.
	CreateMigrationsTable, InsertVersion, MigrationsTableExists string
}
