package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	seckill "github.com/seckill/seckill"
)

// The statements of the operator's controls (docs/design/controls.md, Operator
// controls).
const (
	pauseVoucherSQL = `UPDATE vouchers SET paused = $1 WHERE id = $2`
	// endVoucherSQL moves the start to the new end when it is after it
	// (the sale ended before it began): the window is then empty, ended.
	endVoucherSQL = `UPDATE vouchers SET end_time = LEAST(end_time, $1), begin_time = LEAST(begin_time, end_time, $1) WHERE id = $2`
	// growStockSQL takes the voucher's row lock first: concurrent
	// additions with one key then take turns.
	growStockSQL = `UPDATE vouchers SET stock = stock + $1, initial_stock = initial_stock + $1
WHERE id = $2 AND initial_stock + $1 <= $3`
	// insertStockAdditionSQL records the key, unless it is recorded: a
	// concurrent addition with the key is waited for, and if it commits,
	// this one returns no row (an error would abort the transaction).
	insertStockAdditionSQL = `INSERT INTO voucher_stock_additions (voucher_id, idem_key, units, added_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (voucher_id, idem_key) DO NOTHING RETURNING units`
	selectStockAdditionSQL = `SELECT units FROM voucher_stock_additions WHERE voucher_id = $1 AND idem_key = $2`
)

// PauseVoucher sets the voucher's paused flag; see [seckill.VoucherStore].
func (s *Store) PauseVoucher(ctx context.Context, id int64, paused bool) (*seckill.Voucher, error) {
	if err := s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, pauseVoucherSQL, paused, id)
		return err
	}); err != nil {
		return nil, fmt.Errorf("postgres: pause voucher %d: %w", id, dbErr(err))
	}
	return s.Voucher(ctx, id)
}

// EndVoucher ends the voucher's sale at at, unless it ends earlier; see
// [seckill.VoucherStore].
func (s *Store) EndVoucher(ctx context.Context, id int64, at time.Time) (*seckill.Voucher, error) {
	if err := s.with(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, endVoucherSQL, utc(at), id)
		return err
	}); err != nil {
		return nil, fmt.Errorf("postgres: end voucher %d: %w", id, dbErr(err))
	}
	return s.Voucher(ctx, id)
}

// AddStock adds units to the voucher's stock once per key, in one
// transaction; see [seckill.VoucherStore].
func (s *Store) AddStock(ctx context.Context, id int64, key string, units int64) (_ *seckill.Voucher, added bool, recorded int64, err error) {
	var refusal *seckill.Error
	err = s.with(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, growStockSQL, units, id, seckill.MaxStock)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				// No such voucher, or the total would pass MaxStock: unless
				// the key added its units before.
				switch err := tx.QueryRow(ctx, selectStockAdditionSQL, id, key).Scan(&recorded); {
				case err == nil:
					return nil
				case !errors.Is(err, pgx.ErrNoRows):
					return err
				}
				var one int
				switch err := tx.QueryRow(ctx, `SELECT 1 FROM vouchers WHERE id = $1`, id).Scan(&one); {
				case errors.Is(err, pgx.ErrNoRows):
					refusal = seckill.Errorf(seckill.ErrVoucherNotFound, "voucher %d not found", id)
				case err != nil:
					return err
				default:
					refusal = seckill.Errorf(seckill.ErrInvalidArgument, "add: the stock would pass %d", seckill.MaxStock)
				}
				return refusal
			}
			switch err := tx.QueryRow(ctx, insertStockAdditionSQL, id, key, units, now()).Scan(&recorded); {
			case errors.Is(err, pgx.ErrNoRows):
				// Added once, before: this transaction's growth rolls back.
				if err := tx.QueryRow(ctx, selectStockAdditionSQL, id, key).Scan(&recorded); err != nil {
					return err
				}
				return errAddedBefore
			case err != nil:
				return err
			}
			added = true
			return nil
		})
	})
	switch {
	case errors.Is(err, errAddedBefore):
		added = false
	case refusal != nil:
		return nil, false, 0, fmt.Errorf("postgres: add stock to voucher %d: %w", id, refusal)
	case err != nil:
		return nil, false, 0, fmt.Errorf("postgres: add stock to voucher %d: %w", id, dbErr(err))
	}
	v, err := s.Voucher(ctx, id)
	if err != nil {
		return nil, false, 0, err
	}
	return v, added, recorded, nil
}

// errAddedBefore rolls back an addition of stock whose key was recorded
// by another.
var errAddedBefore = errors.New("added before")
