package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/seckill/seckill/internal/sqlrows"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

const (
	createMigrationsTableSQL = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
) STRICT`
	insertVersionSQL         = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
	migrationsTableExistsSQL = `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'`
)

// beginMigrate starts a run of Migrate ([sqlstore.Store.Migrate]) in one
// transaction. The transaction takes the write lock as it begins
// (_txlock=immediate), so a concurrent Migrate waits for this one and
// then finds every version recorded. SQLite's DDL is transactional: a
// failed migration leaves nothing behind.
func beginMigrate(ctx context.Context, db *sql.DB) (sqlrows.Querier, func(error) error, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("begin: %w", dbErr(err))
	}
	end := func(err error) error {
		if err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("sqlite: migrate: commit: %w", dbErr(err))
		}
		return nil
	}
	return tx, end, nil
}
