package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
)

const voucherColumns = `id, title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel, challenge, challenge_lead_seconds, paused, price, face_value, currency, subtitle, rules, image_url`

const (
	insertVoucherSQL = `INSERT INTO vouchers (title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel, challenge, challenge_lead_seconds, price, face_value, currency, subtitle, rules, image_url)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) RETURNING id`
	selectVoucherSQL         = `SELECT ` + voucherColumns + ` FROM vouchers WHERE id = $1`
	selectVouchersSQL        = `SELECT ` + voucherColumns + ` FROM vouchers ORDER BY id DESC LIMIT $1`
	selectUnendedVouchersSQL = `SELECT ` + voucherColumns + ` FROM vouchers WHERE end_time > $1 ORDER BY id`
)

// CreateVoucher inserts v as it is, and sets its ID and CreatedAt, and its
// Shards to 1 if it was 0 (as it is stored). It does not validate v: the
// service does. The database refuses a negative stock with an error
// wrapping [seckill.ErrInvalidArgument], and so does the store a shard tag
// with a ',' (the column's separator). PayWithin is stored in whole
// seconds, as the service takes it.
func (s *Store) CreateVoucher(ctx context.Context, v *seckill.Voucher) error {
	tags, err := seckill.JoinShardTags(v.ShardTags)
	if err != nil {
		return fmt.Errorf("postgres: create voucher: %w", err)
	}
	created := now()
	var id int64
	err = s.with(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, insertVoucherSQL,
			v.Title, v.Stock, v.InitialStock, utc(v.BeginTime), utc(v.EndTime), created, v.Generation, v.ShardCount(), tags,
			payWithinSeconds(v.PayWithin), v.RebuyAfterCancel, v.Challenge, payWithinSeconds(v.ChallengeLead),
			v.Price, v.Value, v.Currency, v.Subtitle, v.Rules, v.ImageURL,
		).Scan(&id)
	})
	if err != nil {
		return fmt.Errorf("postgres: create voucher: %w", dbErr(err))
	}
	v.ID, v.CreatedAt, v.Shards = id, created, v.ShardCount()
	return nil
}

// Voucher returns the voucher with the id, or an error wrapping
// [seckill.ErrVoucherNotFound].
func (s *Store) Voucher(ctx context.Context, id int64) (*seckill.Voucher, error) {
	var v *seckill.Voucher
	err := s.with(ctx, func(conn *pgx.Conn) error {
		var err error
		v, err = scanVoucher(conn.QueryRow(ctx, selectVoucherSQL, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, seckill.Errorf(seckill.ErrVoucherNotFound, "voucher %d not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: voucher %d: %w", id, dbErr(err))
	}
	return v, nil
}

// Vouchers returns up to limit vouchers, newest first; limit <= 0 means
// 100.
func (s *Store) Vouchers(ctx context.Context, limit int) ([]*seckill.Voucher, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	vs, err := s.queryVouchers(ctx, selectVouchersSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: vouchers: %w", err)
	}
	return vs, nil
}

// UnendedVouchers returns every voucher whose sale ends after t, oldest
// first.
func (s *Store) UnendedVouchers(ctx context.Context, t time.Time) ([]*seckill.Voucher, error) {
	vs, err := s.queryVouchers(ctx, selectUnendedVouchersSQL, utc(t))
	if err != nil {
		return nil, fmt.Errorf("postgres: unended vouchers: %w", err)
	}
	return vs, nil
}

func (s *Store) queryVouchers(ctx context.Context, query string, args ...any) ([]*seckill.Voucher, error) {
	var vs []*seckill.Voucher
	err := s.with(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		vs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*seckill.Voucher, error) { return scanVoucher(row) })
		return err
	})
	return vs, dbErr(err)
}

// scanVoucher reads the voucherColumns of one row.
func scanVoucher(row pgx.Row) (*seckill.Voucher, error) {
	var (
		v         seckill.Voucher
		tags      string
		payWithin int64
		lead      int64
	)
	if err := row.Scan(&v.ID, &v.Title, &v.Stock, &v.InitialStock, &v.BeginTime, &v.EndTime, &v.CreatedAt, &v.Generation, &v.Shards, &tags, &payWithin, &v.RebuyAfterCancel, &v.Challenge, &lead, &v.Paused,
		&v.Price, &v.Value, &v.Currency, &v.Subtitle, &v.Rules, &v.ImageURL); err != nil {
		return nil, err
	}
	v.BeginTime, v.EndTime, v.CreatedAt = v.BeginTime.UTC(), v.EndTime.UTC(), v.CreatedAt.UTC()
	v.ShardTags = seckill.SplitShardTags(tags)
	v.PayWithin = time.Duration(payWithin) * time.Second
	v.ChallengeLead = time.Duration(lead) * time.Second
	return &v, nil
}

// payWithinSeconds returns d as the pay_within_seconds column (and
// challenge_lead_seconds) holds it: whole seconds.
func payWithinSeconds(d time.Duration) int64 {
	return int64(d / time.Second)
}
