package sqlite

import (
	"context"
	"embed"
	"fmt"

	"github.com/seckill/seckill/internal/migrate"
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
	selectVersionsSQL        = `SELECT version FROM schema_migrations ORDER BY version`
	insertVersionSQL         = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
	migrationsTableExistsSQL = `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'`
)

// Migrate applies the embedded migrations that the database has not
// recorded, all in one transaction. The transaction takes the write lock as
// it begins (_txlock=immediate), so a concurrent Migrate waits for this one
// and then finds every version recorded. SQLite's DDL is transactional: a
// failed migration leaves nothing behind.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrate.Load(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: migrate: begin: %w", dbErr(err))
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, createMigrationsTableSQL); err != nil {
		return fmt.Errorf("sqlite: migrate: create schema_migrations: %w", dbErr(err))
	}
	vs, err := readVersions(ctx, tx)
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
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
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("sqlite: migration %04d_%s, statement %d: %w", m.Version, m.Name, i+1, dbErr(err))
			}
		}
		if _, err := tx.ExecContext(ctx, insertVersionSQL, m.Version, m.Name, micros(now())); err != nil {
			return fmt.Errorf("sqlite: migration %04d_%s: record: %w", m.Version, m.Name, dbErr(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: migrate: commit: %w", dbErr(err))
	}
	return nil
}

// Versions returns the migration versions the database has recorded, in
// order; none before the first Migrate.
func (s *Store) Versions(ctx context.Context) ([]int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, migrationsTableExistsSQL).Scan(&n); err != nil {
		return nil, fmt.Errorf("sqlite: versions: %w", dbErr(err))
	}
	if n == 0 {
		return nil, nil
	}
	vs, err := readVersions(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
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
