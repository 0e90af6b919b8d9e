package sqlite

import (
	"database/sql/driver"
	"errors"
	"fmt"

	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	seckill "github.com/seckill/seckill"
)

// dbErr marks err with the domain error it stands for, keeping err in the
// chain: a busy or locked database is transient (another connection held the
// write lock past busy_timeout), a failed CHECK is an invalid argument.
func dbErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, driver.ErrBadConn):
		return fmt.Errorf("%w: %w", seckill.ErrTransient, err)
	}
	switch code(err) & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return fmt.Errorf("%w: %w", seckill.ErrTransient, err)
	}
	if code(err) == sqlite3.SQLITE_CONSTRAINT_CHECK {
		return fmt.Errorf("%w: %w", seckill.ErrInvalidArgument, err)
	}
	return err
}

// code is the extended result code of a SQLite error, 0 for other errors.
func code(err error) int {
	var e *sqlitedriver.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// isUniqueViolation reports whether err is a duplicate primary or unique key.
func isUniqueViolation(err error) bool {
	c := code(err)
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// isForeignKeyViolation reports whether err is a reference to a missing row.
func isForeignKeyViolation(err error) bool {
	return code(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}
