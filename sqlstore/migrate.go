package sqlstore

import (
	"context"
	"fmt"

	"github.com/seckill/seckill/internal/migrate"
	"github.com/seckill/seckill/internal/sqlrows"
)

const selectVersionsSQL = `SELECT version FROM schema_migrations ORDER BY version`

// Migrate applies the dialect's embedded migrations that the database has
// not recorded, in a run kept apart from any other process's by the
// dialect's BeginMigrate: each waits, then finds the versions the other
// recorded.
func (s *Store) Migrate(ctx context.Context) (err error) {
	ms, err := migrate.Load(s.d.Migrations, "migrations")
	if err != nil {
		return s.errorf("migrate: %w", err)
	}
	q, end, err := s.d.BeginMigrate(ctx, s.db)
	if err != nil {
		return s.errorf("migrate: %w", err)
	}
	defer func() { err = end(err) }()

	if _, err := q.ExecContext(ctx, s.d.SQL.CreateMigrationsTable); err != nil {
		return s.errorf("migrate: create schema_migrations: %w", s.d.Err(err))
	}
	vs, err := s.readVersions(ctx, q)
	if err != nil {
		return s.errorf("migrate: %w", err)
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
			if _, err := q.ExecContext(ctx, stmt); err != nil {
				return s.errorf("migration %04d_%s, statement %d: %w", m.Version, m.Name, i+1, s.d.Err(err))
			}
		}
		if _, err := q.ExecContext(ctx, s.d.SQL.InsertVersion, m.Version, m.Name, s.at(now())); err != nil {
			return s.errorf("migration %04d_%s: record: %w", m.Version, m.Name, s.d.Err(err))
		}
	}
	return nil
}

// Versions returns the migration versions the database has recorded, in
// order; none before the first Migrate.
func (s *Store) Versions(ctx context.Context) ([]int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, s.d.SQL.MigrationsTableExists).Scan(&n); err != nil {
		return nil, s.errorf("versions: %w", s.d.Err(err))
	}
	if n == 0 {
		return nil, nil
	}
	vs, err := s.readVersions(ctx, s.db)
	if err != nil {
		return nil, s.errorf("%w", err)
	}
	return vs, nil
}

// readVersions returns the versions recorded in schema_migrations, in order.
func (s *Store) readVersions(ctx context.Context, q sqlrows.Querier) ([]int, error) {
	vs, err := sqlrows.Query(ctx, q, sqlrows.Scalar[int], selectVersionsSQL)
	if err != nil {
		return nil, fmt.Errorf("read versions: %w", s.d.Err(err))
	}
	return vs, nil
}
