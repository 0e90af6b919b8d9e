package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
)

const (
	// insertUserSQL inserts a user unless the phone is taken; then it
	// returns no row. ON CONFLICT waits for a concurrent insert of the phone
	// to commit or roll back before it decides.
	insertUserSQL        = `INSERT INTO users (phone, created_at) VALUES ($1, $2) ON CONFLICT (phone) DO NOTHING RETURNING id`
	selectUserSQL        = `SELECT id, phone, created_at FROM users WHERE id = $1`
	selectUserByPhoneSQL = `SELECT id, phone, created_at FROM users WHERE phone = $1`
)

// EnsureUser returns the user with the phone number, creating one if there
// is none. When concurrent calls race to create it, the unique phone lets
// one insert win; the others find its row.
func (s *Store) EnsureUser(ctx context.Context, phone string) (*seckill.User, bool, error) {
	var (
		u       *seckill.User
		created bool
	)
	err := s.with(ctx, func(conn *pgx.Conn) error {
		// Most logins are of known users: look first, which also spares
		// the identity sequence a number per losing insert.
		var err error
		if u, err = scanUser(conn.QueryRow(ctx, selectUserByPhoneSQL, phone)); !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		at := now()
		var id int64
		err = conn.QueryRow(ctx, insertUserSQL, phone, at).Scan(&id)
		if err == nil {
			u, created = &seckill.User{ID: id, Phone: phone, CreatedAt: at}, true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Another call inserted the phone, and committed.
		u, err = scanUser(conn.QueryRow(ctx, selectUserByPhoneSQL, phone))
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("postgres: ensure user: %w", dbErr(err))
	}
	return u, created, nil
}

// User returns the user with the id, or an error wrapping
// [seckill.ErrUserNotFound].
func (s *Store) User(ctx context.Context, id int64) (*seckill.User, error) {
	var u *seckill.User
	err := s.with(ctx, func(conn *pgx.Conn) error {
		var err error
		u, err = scanUser(conn.QueryRow(ctx, selectUserSQL, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, seckill.Errorf(seckill.ErrUserNotFound, "user %d not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: user %d: %w", id, dbErr(err))
	}
	return u, nil
}

func scanUser(row pgx.Row) (*seckill.User, error) {
	var u seckill.User
	if err := row.Scan(&u.ID, &u.Phone, &u.CreatedAt); err != nil {
		return nil, err
	}
	u.CreatedAt = u.CreatedAt.UTC()
	return &u, nil
}
