package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	seckill "github.com/seckill/seckill"
)

// PostgreSQL error codes (SQLSTATE) the store acts on.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
	codeCheckViolation      = "23514"
	codeStringTooLong       = "22001"
	codeOutOfRange          = "22003"
	codeSerialization       = "40001"
	codeDeadlock            = "40P01"
	codeLockNotAvailable    = "55P03"
	codeTooManyConnections  = "53300"
	codeAdminShutdown       = "57P01"
	codeCrashShutdown       = "57P02"
	codeCannotConnectNow    = "57P03"
	codeIdleSessionTimeout  = "57P05"
	codeQueryCanceled       = "57014" // statement_timeout, or a cancel
	codeReadOnly            = "25006" // a standby, or default_transaction_read_only
	codeIdleInTxTimeout     = "25P03"
	codeTransactionTimeout  = "25P04" // PostgreSQL 17
	codeCompletionUnknown   = "40003"
	codeSnapshotTooOld      = "72000"
	// classConnection is the class of connection exceptions, 08xxx.
	classConnection = "08"
	// classResources is the class of insufficient resources, 53xxx: disk
	// full (53100), out of memory (53200), too many connections (53300),
	// a configuration limit (53400).
	classResources = "53"
	// classSystem is the class of system errors outside PostgreSQL, 58xxx:
	// an I/O error (58030) among them.
	classSystem = "58"
)

// dbErr marks err with the domain error it stands for, keeping err in the
// chain. Transient is every failure that is the database's state, not the
// statement's: a lost connection, a serialization failure or a deadlock,
// and also a server that refuses writes (a standby after a failover), a
// statement or transaction timeout, a disk or memory full, an I/O error.
// Such a statement may succeed as it is once the database is well, and a
// worker retries it in place instead of blaming its orders
// (docs/design/persistence.md, Dead letters). A failed CHECK or a value too large for
// its column is an invalid argument: the row itself is bad.
func dbErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The caller gave up: nothing to retry.
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == codeSerialization, code == codeDeadlock, code == codeLockNotAvailable,
			code == codeAdminShutdown, code == codeCrashShutdown, code == codeCannotConnectNow,
			code == codeIdleSessionTimeout, code == codeQueryCanceled, code == codeReadOnly,
			code == codeIdleInTxTimeout, code == codeTransactionTimeout, code == codeCompletionUnknown,
			code == codeSnapshotTooOld, strings.HasPrefix(code, classConnection),
			strings.HasPrefix(code, classResources), strings.HasPrefix(code, classSystem):
			return fmt.Errorf("%w: %w", seckill.ErrTransient, err)
		case code == codeCheckViolation, code == codeStringTooLong, code == codeOutOfRange:
			return fmt.Errorf("%w: %w", seckill.ErrInvalidArgument, err)
		}
		return err
	}
	var (
		netErr     net.Error
		connectErr *pgconn.ConnectError
	)
	switch {
	case pgconn.SafeToRetry(err),
		errors.As(err, &connectErr),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		errors.As(err, &netErr):
		return fmt.Errorf("%w: %w", seckill.ErrTransient, err)
	}
	return err
}

// isReadOnly reports whether err is the server refusing a write: a
// standby, or a session made read-only. A connection that says so goes on
// saying it after a failover (a writer demoted under the pool's
// connections), so the store closes its connections (Store.with).
func isReadOnly(err error) bool { return sqlState(err) == codeReadOnly }

// sqlState is the SQLSTATE of a PostgreSQL error, "" for other errors.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// classIntegrity is the class of integrity constraint violations, 23xxx.
const classIntegrity = "23"

// isConstraintViolation reports whether err is a violated constraint: a
// unique or foreign key, a CHECK, a NOT NULL.
func isConstraintViolation(err error) bool { return strings.HasPrefix(sqlState(err), classIntegrity) }

// isForeignKeyViolation reports whether err is a reference to a missing row.
func isForeignKeyViolation(err error) bool { return sqlState(err) == codeForeignKeyViolation }

// isRetryable reports whether a SaveOrders transaction that failed with err
// may succeed if run again at once: a concurrent transaction inserted some
// of its orders, or chose it as a deadlock's victim.
func isRetryable(err error) bool {
	switch sqlState(err) {
	case codeUniqueViolation, codeDeadlock, codeSerialization:
		return true
	}
	return false
}

// lostToConcurrent reports whether a transaction that failed with err lost
// to a concurrent one, and may succeed if run again at once: chosen as a
// deadlock's victim, failed to serialize, or waited for a lock past
// lock_timeout.
func lostToConcurrent(err error) bool {
	switch sqlState(err) {
	case codeDeadlock, codeSerialization, codeLockNotAvailable:
		return true
	}
	return false
}
