package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	mysqldriver "github.com/go-sql-driver/mysql"

	seckill "github.com/seckill/seckill"
)

// MySQL and MariaDB error numbers the store acts on.
const (
	errDiskFull              = 1021
	errErrorOnWrite          = 1026 // a file (the binary log) could not be written
	errOutOfMemory           = 1037
	errOutOfSortMemory       = 1038
	errTooManyConnections    = 1040
	errOutOfResources        = 1041
	errServerShutdown        = 1053
	errDuplicateKey          = 1062
	errTableFull             = 1114
	errNetReadError          = 1158
	errNetReadInterrupted    = 1159
	errNetErrorOnWrite       = 1160
	errNetWriteInterrupted   = 1161
	errErrorDuringCommit     = 1180
	errTooManyUserConns      = 1203
	errLockWaitTimeout       = 1205
	errDeadlock              = 1213
	errUserLimitReached      = 1226
	errOptionPrevents        = 1290 // read_only, super_read_only
	errQueryInterrupted      = 1317
	errNoReferencedRow       = 1452 // foreign key
	errOutOfRange            = 1264
	errDataTooLong           = 1406
	errReadOnlyTransaction   = 1792 // a session or transaction READ ONLY
	errReadOnlyMode          = 1836 // MySQL: innodb_read_only and the like
	errConnectionKilled      = 1927 // MariaDB
	errStatementTimeout      = 1969 // MariaDB max_statement_time
	errQueryTimeout          = 3024 // MySQL max_execution_time
	errRunHookError          = 3100 // group replication refused the commit
	errRollbackDuringCommit  = 3101 // the commit was rolled back (group replication)
	errCheckViolationSQL     = 3819 // MySQL 8
	errClientInactiveTimeout = 4031 // MySQL 8: the server ended an idle session
	errCheckViolationDB      = 4025 // MariaDB
)

// dbErr marks err with the domain error it stands for, keeping err in the
// chain. Transient is every failure that is the database's state, not the
// statement's: a lost connection, a deadlock or a lock wait timeout, and
// also a server that refuses writes (read_only after a failover, a
// read-only session), a statement timeout, a disk, table or memory full.
// Such a statement may succeed as it is once the database is well, and a
// worker retries it in place instead of blaming its orders
// (docs/design/persistence.md, Dead letters). A failed CHECK or a value too large for
// its column is an invalid argument: the row itself is bad.
func dbErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The caller gave up; that is theirs to report, not a fault of the
		// database.
		return err
	}
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errTooManyConnections, errServerShutdown, errLockWaitTimeout, errDeadlock, errConnectionKilled,
			errOptionPrevents, errReadOnlyTransaction, errReadOnlyMode,
			errStatementTimeout, errQueryTimeout, errQueryInterrupted,
			errDiskFull, errErrorOnWrite, errTableFull, errOutOfMemory, errOutOfSortMemory, errOutOfResources,
			errRunHookError, errRollbackDuringCommit,
			errNetReadError, errNetReadInterrupted, errNetErrorOnWrite, errNetWriteInterrupted,
			errErrorDuringCommit, errTooManyUserConns, errUserLimitReached, errClientInactiveTimeout:
			return fmt.Errorf("%w: %w", seckill.ErrTransient, err)
		case errCheckViolationSQL, errCheckViolationDB, errOutOfRange, errDataTooLong:
			return fmt.Errorf("%w: %w", seckill.ErrInvalidArgument, err)
		}
		return err
	}
	var netErr net.Error
	switch {
	case errors.Is(err, driver.ErrBadConn),
		errors.Is(err, mysqldriver.ErrInvalidConn),
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

// errNumber is the MySQL error number of err, 0 for other errors.
func errNumber(err error) uint16 {
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// isReadOnly reports whether err is the server refusing a write: read_only
// (a replica, or a writer demoted by a failover), or a read-only session.
// A connection that says so may go on saying it after the failover (it
// still reaches the demoted writer), so the store closes its connections
// (Store.closeReadOnly).
func isReadOnly(err error) bool {
	switch errNumber(err) {
	case errOptionPrevents, errReadOnlyTransaction, errReadOnlyMode:
		return true
	}
	return false
}

// isUniqueViolation reports whether err is a duplicate primary or unique key.
func isUniqueViolation(err error) bool { return errNumber(err) == errDuplicateKey }

// isForeignKeyViolation reports whether err is a reference to a missing row.
func isForeignKeyViolation(err error) bool { return errNumber(err) == errNoReferencedRow }

// isDeadlock reports whether err is InnoDB choosing this transaction as a
// deadlock's victim, which rolled it back whole.
func isDeadlock(err error) bool { return errNumber(err) == errDeadlock }

// isLockWaitTimeout reports whether err is InnoDB giving up waiting for a
// row lock (innodb_lock_wait_timeout), which rolled back the statement.
func isLockWaitTimeout(err error) bool { return errNumber(err) == errLockWaitTimeout }
