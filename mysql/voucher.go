package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

const voucherColumns = `id, title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel, challenge, challenge_lead_seconds, paused`

const (
	insertVoucherSQL = `INSERT INTO vouchers (title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel, challenge, challenge_lead_seconds)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	selectVoucherSQL         = `SELECT ` + voucherColumns + ` FROM vouchers WHERE id = ?`
	selectVouchersSQL        = `SELECT ` + voucherColumns + ` FROM vouchers ORDER BY id DESC LIMIT ?`
	selectUnendedVouchersSQL = `SELECT ` + voucherColumns + ` FROM vouchers WHERE end_time > ? ORDER BY id`
)

// CreateVoucher inserts v as it is, and sets its ID and CreatedAt, and its
// Shards to 1 if it was 0 (as it is stored). It does not validate v: the
// service does. The database refuses a negative stock with an error
// wrapping [seckill.ErrInvalidArgument], and so does the store a shard tag
// with a ',' (the column's separator). PayWithin is stored in whole
// seconds, as the service takes it.
func (s *Store) CreateVoucher(ctx context.Context, v *seckill.Voucher) (err error) {
	defer s.closeReadOnly(ctx, &err)
	tags, err := seckill.JoinShardTags(v.ShardTags)
	if err != nil {
		return fmt.Errorf("mysql: create voucher: %w", err)
	}
	created := now()
	res, err := s.db.ExecContext(ctx, insertVoucherSQL,
		v.Title, v.Stock, v.InitialStock, utc(v.BeginTime), utc(v.EndTime), created, v.Generation, v.ShardCount(), tags,
		payWithinSeconds(v.PayWithin), v.RebuyAfterCancel, v.Challenge, payWithinSeconds(v.ChallengeLead))
	if err != nil {
		return fmt.Errorf("mysql: create voucher: %w", dbErr(err))
	}
	id, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("mysql: create voucher: %w", dbErr(err))
	}
	v.ID, v.CreatedAt, v.Shards = id, created, v.ShardCount()
	return nil
}

// Voucher returns the voucher with the id, or an error wrapping
// [seckill.ErrVoucherNotFound].
func (s *Store) Voucher(ctx context.Context, id int64) (*seckill.Voucher, error) {
	v, err := scanVoucher(s.db.QueryRowContext(ctx, selectVoucherSQL, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, seckill.Errorf(seckill.ErrVoucherNotFound, "voucher %d not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: voucher %d: %w", id, dbErr(err))
	}
	return v, nil
}

// Vouchers returns up to limit vouchers, newest first; limit <= 0 means
// 100.
func (s *Store) Vouchers(ctx context.Context, limit int) ([]*seckill.Voucher, error) {
	if limit <= 0 {
		limit = defaultLimit
	}
	vs, err := sqlrows.Query(ctx, s.db, scanVoucher, selectVouchersSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("mysql: vouchers: %w", dbErr(err))
	}
	return vs, nil
}

// UnendedVouchers returns every voucher whose sale ends after t, oldest
// first.
func (s *Store) UnendedVouchers(ctx context.Context, t time.Time) ([]*seckill.Voucher, error) {
	vs, err := sqlrows.Query(ctx, s.db, scanVoucher, selectUnendedVouchersSQL, utc(t))
	if err != nil {
		return nil, fmt.Errorf("mysql: unended vouchers: %w", dbErr(err))
	}
	return vs, nil
}

// scanVoucher reads the voucherColumns of one row.
func scanVoucher(row sqlrows.Scanner) (*seckill.Voucher, error) {
	var (
		v         seckill.Voucher
		tags      string
		payWithin int64
		lead      int64
	)
	if err := row.Scan(&v.ID, &v.Title, &v.Stock, &v.InitialStock, &v.BeginTime, &v.EndTime, &v.CreatedAt, &v.Generation, &v.Shards, &tags, &payWithin, &v.RebuyAfterCancel, &v.Challenge, &lead, &v.Paused); err != nil {
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
