package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	seckill "github.com/seckill/seckill"
)

const (
	insertUserSQL        = `INSERT INTO users (phone, created_at) VALUES (?, ?) RETURNING id`
	selectUserSQL        = `SELECT id, phone, created_at FROM users WHERE id = ?`
	selectUserByPhoneSQL = `SELECT id, phone, created_at FROM users WHERE phone = ?`
)

// EnsureUser returns the user with the phone number, creating one if there
// is none. When concurrent calls race to create it, the unique phone lets
// one insert win; the others find its row.
func (s *Store) EnsureUser(ctx context.Context, phone string) (_ *seckill.User, _ bool, err error) {
	defer s.closeReadOnly(&err)
	u, err := scanUser(s.db.QueryRowContext(ctx, selectUserByPhoneSQL, phone))
	if err == nil {
		return u, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, false, fmt.Errorf("sqlite: ensure user: %w", dbErr(err))
	}
	created := now()
	var id int64
	err = s.db.QueryRowContext(ctx, insertUserSQL, phone, micros(created)).Scan(&id)
	if err == nil {
		return &seckill.User{ID: id, Phone: phone, CreatedAt: created}, true, nil
	}
	if !isUniqueViolation(err) {
		return nil, false, fmt.Errorf("sqlite: ensure user: %w", dbErr(err))
	}
	u, err = scanUser(s.db.QueryRowContext(ctx, selectUserByPhoneSQL, phone))
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: ensure user: read the user created at the same time: %w", dbErr(err))
	}
	return u, false, nil
}

// User returns the user with the id, or an error wrapping
// [seckill.ErrUserNotFound].
func (s *Store) User(ctx context.Context, id int64) (*seckill.User, error) {
	u, err := scanUser(s.db.QueryRowContext(ctx, selectUserSQL, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, seckill.Errorf(seckill.ErrUserNotFound, "user %d not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: user %d: %w", id, dbErr(err))
	}
	return u, nil
}

func scanUser(row *sql.Row) (*seckill.User, error) {
	var (
		u         seckill.User
		createdAt int64
	)
	if err := row.Scan(&u.ID, &u.Phone, &createdAt); err != nil {
		return nil, err
	}
	u.CreatedAt = fromMicros(createdAt)
	return &u, nil
}
