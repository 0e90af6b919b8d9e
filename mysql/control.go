package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	seckill "github.com/seckill/seckill"
)

// The statements of the operator's controls (docs/design/controls.md, Operator
// controls).
const (
	pauseVoucherSQL = `UPDATE vouchers SET paused = ? WHERE id = ?`
	// endVoucherSQL moves the start to the new end when it is after it
	// (the sale ended before it began): the window is then empty, ended.
	endVoucherSQL = `UPDATE vouchers SET end_time = LEAST(end_time, ?), begin_time = LEAST(begin_time, end_time, ?) WHERE id = ?`
	// growStockSQL takes the voucher's row lock first: concurrent
	// additions with one key then take turns, and the second meets the
	// first's committed key.
	growStockSQL = `UPDATE vouchers SET stock = stock + ?, initial_stock = initial_stock + ?
WHERE id = ? AND initial_stock + ? <= ?`
	insertStockAdditionSQL = `INSERT INTO voucher_stock_additions (voucher_id, idem_key, units, added_at) VALUES (?, ?, ?, ?)`
	selectStockAdditionSQL = `SELECT units FROM voucher_stock_additions WHERE voucher_id = ? AND idem_key = ?`
)

// PauseVoucher sets the voucher's paused flag; see [seckill.VoucherStore].
func (s *Store) PauseVoucher(ctx context.Context, id int64, paused bool) (_ *seckill.Voucher, err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, pauseVoucherSQL, paused, id); err != nil {
		return nil, fmt.Errorf("mysql: pause voucher %d: %w", id, dbErr(err))
	}
	return s.Voucher(ctx, id)
}

// EndVoucher ends the voucher's sale at at, unless it ends earlier; see
// [seckill.VoucherStore].
func (s *Store) EndVoucher(ctx context.Context, id int64, at time.Time) (_ *seckill.Voucher, err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, endVoucherSQL, utc(at), utc(at), id); err != nil {
		return nil, fmt.Errorf("mysql: end voucher %d: %w", id, dbErr(err))
	}
	return s.Voucher(ctx, id)
}

// AddStock adds units to the voucher's stock once per key, in one
// transaction; see [seckill.VoucherStore].
func (s *Store) AddStock(ctx context.Context, id int64, key string, units int64) (_ *seckill.Voucher, added bool, recorded int64, err error) {
	defer s.closeReadOnly(ctx, &err)
	added, err = s.addStock(ctx, id, key, units)
	if err != nil {
		return nil, false, 0, fmt.Errorf("mysql: add stock to voucher %d: %w", id, err)
	}
	if err := s.db.QueryRowContext(ctx, selectStockAdditionSQL, id, key).Scan(&recorded); err != nil {
		return nil, false, 0, fmt.Errorf("mysql: add stock to voucher %d: read the addition: %w", id, dbErr(err))
	}
	v, err := s.Voucher(ctx, id)
	if err != nil {
		return nil, false, 0, err
	}
	return v, added, recorded, nil
}

// addStock is AddStock's transaction; it reports false when the key was
// recorded already.
func (s *Store) addStock(ctx context.Context, id int64, key string, units int64) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin: %w", dbErr(err))
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, growStockSQL, units, units, id, units, seckill.MaxStock)
	if err != nil {
		return false, dbErr(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, dbErr(err)
	} else if n == 0 {
		// No such voucher, or the total would pass MaxStock: unless the
		// key added its units before.
		var recorded int64
		switch err := tx.QueryRowContext(ctx, selectStockAdditionSQL, id, key).Scan(&recorded); {
		case err == nil:
			return false, nil
		case !errors.Is(err, sql.ErrNoRows):
			return false, dbErr(err)
		}
		if _, err := s.Voucher(ctx, id); err != nil {
			return false, err
		}
		return false, seckill.Errorf(seckill.ErrInvalidArgument, "add: the stock would pass %d", seckill.MaxStock)
	}
	if _, err := tx.ExecContext(ctx, insertStockAdditionSQL, id, key, units, now()); err != nil {
		if isUniqueViolation(err) {
			return false, nil // rolled back: added once, before
		}
		return false, dbErr(err)
	}
	if err := commit(ctx, tx); err != nil {
		return false, fmt.Errorf("commit: %w", dbErr(err))
	}
	return true, nil
}
