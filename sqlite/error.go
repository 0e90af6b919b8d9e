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
// chain. Transient is every failure that is the database's state, not the
// statement's: a busy or locked database (another connection held the
// write lock past busy_timeout), and also a file that cannot be written
// (read-only, a disk full, an I/O error), memory full, an interrupt. Such a
// statement may succeed as it is once the file is well, and a worker
// retries it in place instead of blaming its orders (docs/design/persistence.md, Dead
// letters). A failed CHECK is an invalid argument: the row itself is bad.
func dbErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, driver.ErrBadConn):
		return fmt.Errorf("%w: %w", seckill.ErrTransient, err)
	}
	switch code(err) & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_FULL,
		sqlite3.SQLITE_IOERR, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_PROTOCOL:
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

// isReadOnly reports whether err is SQLite refusing a write to a file it
// opened read-only: a connection that opened it so goes on refusing after
// the file is writable again, so the store closes its connections
// (Store.closeReadOnly).
func isReadOnly(err error) bool { return code(err)&0xff == sqlite3.SQLITE_READONLY }

// isUniqueViolation reports whether err is a duplicate primary or unique key.
func isUniqueViolation(err error) bool {
	c := code(err)
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// isForeignKeyViolation reports whether err is a reference to a missing row.
func isForeignKeyViolation(err error) bool {
	return code(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}
