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
	errTooManyConnections = 1040
	errServerShutdown     = 1053
	errDuplicateKey       = 1062
	errLockWaitTimeout    = 1205
	errDeadlock           = 1213
	errNoReferencedRow    = 1452 // foreign key
	errOutOfRange         = 1264
	errDataTooLong        = 1406
	errConnectionKilled   = 1927 // MariaDB
	errCheckViolationSQL  = 3819 // MySQL 8
	errCheckViolationDB   = 4025 // MariaDB
)

// dbErr marks err with the domain error it stands for, keeping err in the
// chain: a lost connection, a deadlock or a lock wait timeout is transient
// (the statement or transaction may succeed as it is if tried again); a
// failed CHECK or a value too large for its column is an invalid argument.
func dbErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The caller gave up; that is theirs to report, not a fault of the
		// database.
		return err
	}
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errTooManyConnections, errServerShutdown, errLockWaitTimeout, errDeadlock, errConnectionKilled:
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
