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
	// adoptUserSQL rewrites a legacy phone, if the row still has it.
	adoptUserSQL = `UPDATE users SET phone = $1 WHERE id = $2 AND phone = $3`
)

// EnsureUser returns the user with the phone number, else the user of one
// of its legacy forms, rewritten to phone, else a new user. When concurrent
// calls race to create it, the unique phone lets one insert win; the others
// find its row.
func (s *Store) EnsureUser(ctx context.Context, phone string, legacy ...string) (*seckill.User, bool, error) {
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
		if len(legacy) > 0 {
			if u, err = adoptLegacyUser(ctx, conn, phone, legacy); u != nil || err != nil {
				return err
			}
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

// adoptLegacyUser makes the oldest user stored under one of the legacy
// forms of phone the phone's user, and returns it; nil when there is none.
// The rewrite is conditional, and the phone unique: of concurrent calls,
// one rewrites and the others read the phone's user.
func adoptLegacyUser(ctx context.Context, conn *pgx.Conn, phone string, legacy []string) (*seckill.User, error) {
	var old *seckill.User
	for _, l := range legacy {
		u, err := scanUser(conn.QueryRow(ctx, selectUserByPhoneSQL, l))
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if old == nil || u.ID < old.ID {
			old = u
		}
	}
	if old == nil {
		return nil, nil
	}
	tag, err := conn.Exec(ctx, adoptUserSQL, phone, old.ID, old.Phone)
	switch {
	case err == nil && tag.RowsAffected() == 1:
		old.Phone = phone
		return old, nil
	case err != nil && !isConstraintViolation(err):
		return nil, err
	}
	// Another call took the phone first: it rewrote the same row, or made
	// a user of the phone; either is the phone's user. (The only constraint
	// an E.164 phone can violate is the unique one.)
	u, err := scanUser(conn.QueryRow(ctx, selectUserByPhoneSQL, phone))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return u, err
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
