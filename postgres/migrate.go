package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckill/seckill/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

const (
	// lockMigrationsSQL takes a lock that the transaction holds to its end.
	// It is named after the schema the tables go in, so that schemas of one
	// database migrate independently.
	lockMigrationsSQL = `SELECT pg_advisory_xact_lock(hashtext('seckill_migrate'), hashtext(coalesce(current_schema(), '')))`

	createMigrationsTableSQL = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER      PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at TIMESTAMPTZ  NOT NULL
)`
	selectVersionsSQL        = `SELECT version FROM schema_migrations ORDER BY version`
	selectVersionAppliedSQL  = `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`
	insertVersionSQL         = `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`
	migrationsTableExistsSQL = `SELECT to_regclass('schema_migrations') IS NOT NULL`
)

// Migrate applies the embedded migrations that the database has not
// recorded, each in a transaction of its own (PostgreSQL's DDL is
// transactional: a failed migration leaves nothing behind). Each
// transaction first takes an advisory lock, so that concurrent Migrate
// calls of any process take turns, and each finds the versions the others
// recorded.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrate.Load(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	err = s.with(ctx, func(conn *pgx.Conn) error {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, lockMigrationsSQL); err != nil {
				return fmt.Errorf("take the migration lock: %w", err)
			}
			if _, err := tx.Exec(ctx, createMigrationsTableSQL); err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, m := range ms {
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, lockMigrationsSQL); err != nil {
					return fmt.Errorf("take the migration lock: %w", err)
				}
				var applied bool
				if err := tx.QueryRow(ctx, selectVersionAppliedSQL, m.Version).Scan(&applied); err != nil {
					return fmt.Errorf("read versions: %w", err)
				}
				if applied {
					return nil
				}
				for i, stmt := range m.Statements {
					if _, err := tx.Exec(ctx, stmt); err != nil {
						return fmt.Errorf("statement %d: %w", i+1, err)
					}
				}
				if _, err := tx.Exec(ctx, insertVersionSQL, m.Version, m.Name, now()); err != nil {
					return fmt.Errorf("record: %w", err)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", dbErr(err))
	}
	return nil
}

// Versions returns the migration versions the database has recorded, in
// order; none before the first Migrate.
func (s *Store) Versions(ctx context.Context) ([]int, error) {
	var vs []int
	err := s.with(ctx, func(conn *pgx.Conn) error {
		var exists bool
		if err := conn.QueryRow(ctx, migrationsTableExistsSQL).Scan(&exists); err != nil || !exists {
			return err
		}
		rows, err := conn.Query(ctx, selectVersionsSQL)
		if err != nil {
			return err
		}
		vs, err = pgx.CollectRows(rows, pgx.RowTo[int])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: versions: %w", dbErr(err))
	}
	return vs, nil
}
