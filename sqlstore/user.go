package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

const (
	insertUserSQL        = `INSERT INTO users (phone, created_at) VALUES (?, ?)`
	selectUserSQL        = `SELECT id, phone, created_at FROM users WHERE id = ?`
	selectUserByPhoneSQL = `SELECT id, phone, created_at FROM users WHERE phone = ?`
	// adoptUserSQL rewrites a legacy phone, if the row still has it.
	adoptUserSQL = `UPDATE users SET phone = ? WHERE id = ? AND phone = ?`
)

// EnsureUser returns the user with the phone number, else the user of one
// of its legacy forms, rewritten to phone, else a new user. When concurrent
// calls race to create it, the unique phone lets one insert win; the others
// find its row.
func (s *Store) EnsureUser(ctx context.Context, phone string, legacy ...string) (_ *seckill.User, _ bool, err error) {
	defer s.closeReadOnly(ctx, &err)
	// Most logins are of known users: look first, which also spares the
	// AUTO_INCREMENT counter an id per failed insert.
	u, err := scanUser(s.db.QueryRowContext(ctx, selectUserByPhoneSQL, phone))
	if err == nil {
		return u, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, false, s.errorf("ensure user: %w", s.d.Err(err))
	}
	if len(legacy) > 0 {
		u, err := s.adoptLegacyUser(ctx, phone, legacy)
		if err != nil {
			return nil, false, s.errorf("ensure user: adopt a legacy user: %w", s.d.Err(err))
		}
		if u != nil {
			return u, false, nil
		}
	}
	created := now()
	res, err := s.db.ExecContext(ctx, insertUserSQL, phone, s.at(created))
	if err == nil {
		id, err := res.LastInsertId()
		if err != nil {
			return nil, false, s.errorf("ensure user: %w", s.d.Err(err))
		}
		return &seckill.User{ID: id, Phone: phone, CreatedAt: created}, true, nil
	}
	if !s.d.IsUnique(err) {
		return nil, false, s.errorf("ensure user: %w", s.d.Err(err))
	}
	// Another call inserted the phone, and committed: the duplicate key
	// error comes only once the winning insert commits.
	u, err = scanUser(s.db.QueryRowContext(ctx, selectUserByPhoneSQL, phone))
	if err != nil {
		return nil, false, s.errorf("ensure user: read the user created at the same time: %w", s.d.Err(err))
	}
	return u, false, nil
}

// adoptLegacyUser makes the oldest user stored under one of the legacy
// forms of phone the phone's user (sqlrows.AdoptLegacyUser).
func (s *Store) adoptLegacyUser(ctx context.Context, phone string, legacy []string) (*seckill.User, error) {
	return sqlrows.AdoptLegacyUser(ctx, s.db, scanUser, selectUserByPhoneSQL, adoptUserSQL, s.d.IsUnique, phone, legacy)
}

// User returns the user with the id, or an error wrapping
// [seckill.ErrUserNotFound].
func (s *Store) User(ctx context.Context, id int64) (*seckill.User, error) {
	u, err := scanUser(s.db.QueryRowContext(ctx, selectUserSQL, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, seckill.Errorf(seckill.ErrUserNotFound, "user %d not found", id)
	}
	if err != nil {
		return nil, s.errorf("user %d: %w", id, s.d.Err(err))
	}
	return u, nil
}

func scanUser(row *sql.Row) (*seckill.User, error) {
	var (
		u         seckill.User
		createdAt nullTime
	)
	if err := row.Scan(&u.ID, &u.Phone, &createdAt); err != nil {
		return nil, err
	}
	u.CreatedAt = createdAt.Time
	return &u, nil
}
