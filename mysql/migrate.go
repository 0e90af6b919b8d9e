package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/seckill/seckill/internal/sqlrows"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrateLockWait is how long Migrate waits for another process's Migrate
// to finish.
const migrateLockWait = 60 * time.Second

const (
	// The lock is named after the database, so that databases on one
	// server migrate independently; MD5 keeps the name within MySQL's 64
	// characters whatever the database's name.
	getMigrateLockSQL     = `SELECT GET_LOCK(CONCAT('seckill_migrate_', MD5(DATABASE())), ?)`
	releaseMigrateLockSQL = `SELECT RELEASE_LOCK(CONCAT('seckill_migrate_', MD5(DATABASE())))`

	createMigrationsTableSQL = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INT          NOT NULL,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
	insertVersionSQL         = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
	migrationsTableExistsSQL = `SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'schema_migrations'`
)

// beginMigrate starts a run of Migrate ([sqlstore.Store.Migrate]) on one
// connection of the pool that holds a named lock (GET_LOCK) for the whole
// run, which keeps concurrent Migrate calls of any process apart.
//
// MySQL's DDL is not transactional: every statement commits on its own, so
// a migration that fails half-way stays half-applied and unrecorded, and
// must be written to be run again (IF NOT EXISTS).
func beginMigrate(ctx context.Context, db *sql.DB) (sqlrows.Querier, func(error) error, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, dbErr(err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, getMigrateLockSQL, int(migrateLockWait.Seconds())).Scan(&got); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("take the migration lock: %w", dbErr(err))
	}
	if got.Int64 != 1 {
		conn.Close()
		return nil, nil, fmt.Errorf("another migration held the lock for %v", migrateLockWait)
	}
	end := func(err error) error {
		defer conn.Close()
		// Release even when ctx is done: a lock left on a pooled
		// connection would block every later Migrate.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var released sql.NullInt64
		if rerr := conn.QueryRowContext(rctx, releaseMigrateLockSQL).Scan(&released); rerr != nil {
			// Closing the session releases its locks.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			err = errors.Join(err, fmt.Errorf("mysql: migrate: release the migration lock: %w", dbErr(rerr)))
		}
		return err
	}
	return conn, end, nil
}
