package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

// VoucherColumns are a voucher's columns (scanVoucher), for a dialect's
// SelectDeadlineVouchers too.
const VoucherColumns = `id, title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel, challenge, challenge_lead_seconds, paused, price, face_value, currency, subtitle, rules, image_url`

const (
	insertVoucherSQL = `INSERT INTO vouchers (title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel, challenge, challenge_lead_seconds, price, face_value, currency, subtitle, rules, image_url)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	selectVoucherSQL         = `SELECT ` + VoucherColumns + ` FROM vouchers WHERE id = ?`
	selectVouchersSQL        = `SELECT ` + VoucherColumns + ` FROM vouchers ORDER BY id DESC LIMIT ?`
	selectUnendedVouchersSQL = `SELECT ` + VoucherColumns + ` FROM vouchers WHERE end_time > ? ORDER BY id`
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
		return s.errorf("create voucher: %w", err)
	}
	created := now()
	res, err := s.db.ExecContext(ctx, insertVoucherSQL,
		v.Title, v.Stock, v.InitialStock, s.at(v.BeginTime), s.at(v.EndTime), s.at(created), v.Generation, v.ShardCount(), tags,
		payWithinSeconds(v.PayWithin), v.RebuyAfterCancel, v.Challenge, payWithinSeconds(v.ChallengeLead),
		v.Price, v.Value, v.Currency, v.Subtitle, v.Rules, v.ImageURL)
	if err != nil {
		return s.errorf("create voucher: %w", s.d.Err(err))
	}
	id, err := res.LastInsertId()
	if err != nil {
		return s.errorf("create voucher: %w", s.d.Err(err))
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
		return nil, s.errorf("voucher %d: %w", id, s.d.Err(err))
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
		return nil, s.errorf("vouchers: %w", s.d.Err(err))
	}
	return vs, nil
}

// UnendedVouchers returns every voucher whose sale ends after t, oldest
// first.
func (s *Store) UnendedVouchers(ctx context.Context, t time.Time) ([]*seckill.Voucher, error) {
	vs, err := sqlrows.Query(ctx, s.db, scanVoucher, selectUnendedVouchersSQL, s.at(t))
	if err != nil {
		return nil, s.errorf("unended vouchers: %w", s.d.Err(err))
	}
	return vs, nil
}

// scanVoucher reads the VoucherColumns of one row.
func scanVoucher(row sqlrows.Scanner) (*seckill.Voucher, error) {
	var (
		v                     seckill.Voucher
		begin, end, createdAt nullTime
		tags                  string
		payWithin             int64
		lead                  int64
	)
	if err := row.Scan(&v.ID, &v.Title, &v.Stock, &v.InitialStock, &begin, &end, &createdAt, &v.Generation, &v.Shards, &tags, &payWithin, &v.RebuyAfterCancel, &v.Challenge, &lead, &v.Paused,
		&v.Price, &v.Value, &v.Currency, &v.Subtitle, &v.Rules, &v.ImageURL); err != nil {
		return nil, err
	}
	v.BeginTime, v.EndTime, v.CreatedAt = begin.Time, end.Time, createdAt.Time
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
