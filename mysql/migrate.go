package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/seckill/seckill/internal/migrate"
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
	selectVersionsSQL        = `SELECT version FROM schema_migrations ORDER BY version`
	insertVersionSQL         = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
	migrationsTableExistsSQL = `SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'schema_migrations'`
)

// Migrate applies the embedded migrations that the database has not
// recorded. A named lock (GET_LOCK), held by one connection of the pool
// for the whole run, keeps concurrent Migrate calls of any process apart:
// each waits, then finds the versions the other recorded.
//
// MySQL's DDL is not transactional: every statement commits on its own, so
// a migration that fails half-way stays half-applied and unrecorded, and
// must be written to be run again (IF NOT EXISTS).
func (s *Store) Migrate(ctx context.Context) (err error) {
	ms, err := migrate.Load(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", dbErr(err))
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, getMigrateLockSQL, int(migrateLockWait.Seconds())).Scan(&got); err != nil {
		return fmt.Errorf("mysql: migrate: take the migration lock: %w", dbErr(err))
	}
	if got.Int64 != 1 {
		return fmt.Errorf("mysql: migrate: another migration held the lock for %v", migrateLockWait)
	}
	defer func() {
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
	}()

	if _, err := conn.ExecContext(ctx, createMigrationsTableSQL); err != nil {
		return fmt.Errorf("mysql: migrate: create schema_migrations: %w", dbErr(err))
	}
	vs, err := readVersions(ctx, conn)
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	applied := map[int]bool{}
	for _, v := range vs {
		applied[v] = true
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		for i, stmt := range m.Statements {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("mysql: migration %04d_%s, statement %d: %w", m.Version, m.Name, i+1, dbErr(err))
			}
		}
		if _, err := conn.ExecContext(ctx, insertVersionSQL, m.Version, m.Name, now()); err != nil {
			return fmt.Errorf("mysql: migration %04d_%s: record: %w", m.Version, m.Name, dbErr(err))
		}
	}
	return nil
}

// Versions returns the migration versions the database has recorded, in
// order; none before the first Migrate.
func (s *Store) Versions(ctx context.Context) ([]int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, migrationsTableExistsSQL).Scan(&n); err != nil {
		return nil, fmt.Errorf("mysql: versions: %w", dbErr(err))
	}
	if n == 0 {
		return nil, nil
	}
	vs, err := readVersions(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return vs, nil
}

// readVersions returns the versions recorded in schema_migrations, in order.
func readVersions(ctx context.Context, q sqlrows.Querier) ([]int, error) {
	vs, err := sqlrows.Query(ctx, q, sqlrows.Scalar[int], selectVersionsSQL)
	if err != nil {
		return nil, fmt.Errorf("read versions: %w", dbErr(err))
	}
	return vs, nil
}
