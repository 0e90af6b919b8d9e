package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	seckill "github.com/seckill/seckill"
)

// The statements of the operator's controls (docs/design/controls.md, Operator
// controls) the dialects agree on.
const (
	pauseVoucherSQL = `UPDATE vouchers SET paused = ? WHERE id = ?`
	// growStockSQL takes the voucher's row lock first (SQLite's write lock
	// is taken already): concurrent additions with one key then take
	// turns, and the second meets the first's committed key.
	growStockSQL = `UPDATE vouchers SET stock = stock + ?, initial_stock = initial_stock + ?
WHERE id = ? AND initial_stock + ? <= ?`
	insertStockAdditionSQL = `INSERT INTO voucher_stock_additions (voucher_id, idem_key, units, added_at) VALUES (?, ?, ?, ?)`
	selectStockAdditionSQL = `SELECT units FROM voucher_stock_additions WHERE voucher_id = ? AND idem_key = ?`
)

// PauseVoucher sets the voucher's paused flag; see [seckill.VoucherStore].
func (s *Store) PauseVoucher(ctx context.Context, id int64, paused bool) (_ *seckill.Voucher, err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, pauseVoucherSQL, paused, id); err != nil {
		return nil, s.errorf("pause voucher %d: %w", id, s.d.Err(err))
	}
	return s.Voucher(ctx, id)
}

// EndVoucher ends the voucher's sale at at, unless it ends earlier; see
// [seckill.VoucherStore].
func (s *Store) EndVoucher(ctx context.Context, id int64, at time.Time) (_ *seckill.Voucher, err error) {
	defer s.closeReadOnly(ctx, &err)
	if _, err := s.db.ExecContext(ctx, s.d.SQL.EndVoucher, s.at(at), s.at(at), id); err != nil {
		return nil, s.errorf("end voucher %d: %w", id, s.d.Err(err))
	}
	return s.Voucher(ctx, id)
}

// AddStock adds units to the voucher's stock once per key, in one
// transaction; see [seckill.VoucherStore].
func (s *Store) AddStock(ctx context.Context, id int64, key string, units int64) (_ *seckill.Voucher, added bool, recorded int64, err error) {
	defer s.closeReadOnly(ctx, &err)
	added, err = s.addStock(ctx, id, key, units)
	if err != nil {
		return nil, false, 0, s.errorf("add stock to voucher %d: %w", id, err)
	}
	if err := s.db.QueryRowContext(ctx, selectStockAdditionSQL, id, key).Scan(&recorded); err != nil {
		return nil, false, 0, s.errorf("add stock to voucher %d: read the addition: %w", id, s.d.Err(err))
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
		return false, fmt.Errorf("begin: %w", s.d.Err(err))
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, growStockSQL, units, units, id, units, seckill.MaxStock)
	if err != nil {
		return false, s.d.Err(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, s.d.Err(err)
	} else if n == 0 {
		// No such voucher, or the total would pass MaxStock: unless the
		// key added its units before.
		var recorded int64
		switch err := tx.QueryRowContext(ctx, selectStockAdditionSQL, id, key).Scan(&recorded); {
		case err == nil:
			return false, nil
		case !errors.Is(err, sql.ErrNoRows):
			return false, s.d.Err(err)
		}
		if _, err := s.Voucher(ctx, id); err != nil {
			return false, err
		}
		return false, seckill.Errorf(seckill.ErrInvalidArgument, "add: the stock would pass %d", seckill.MaxStock)
	}
	if _, err := tx.ExecContext(ctx, insertStockAdditionSQL, id, key, units, s.at(now())); err != nil {
		if s.d.IsUnique(err) {
			return false, nil // rolled back: added once, before
		}
		return false, s.d.Err(err)
	}
	if err := Commit(ctx, tx); err != nil {
		return false, fmt.Errorf("commit: %w", s.d.Err(err))
	}
	return true, nil
}
