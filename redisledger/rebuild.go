package redisledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/seckill/seckill"
)

// Restore makes the cache ready to sell at start: it checks the cache
// server (Fence.Check), which unloads the vouchers whose data may be older
// if the server changed, and then rebuilds the vouchers on sale whose
// stock the cache does not hold, so that a Redis that restarted empty or
// older sells on exactly where the database and the queued orders say the
// sale stands (G6). Those whose sale ended are rebuilt by a Watch.
func (l *Ledger) Restore(ctx context.Context) error {
	if err := l.Fence.check(ctx); err != nil {
		return err
	}
	vs, err := l.Vouchers.Store.UnendedVouchers(ctx, l.now())
	if err != nil {
		return fmt.Errorf("restore vouchers: %w", err)
	}
	for _, v := range vs {
		l.Vouchers.Remember(v)
	}
	left, err := l.Remaining(ctx, vs...)
	if err != nil {
		return fmt.Errorf("restore vouchers: %w", err)
	}
	var errs []error
	for _, v := range vs {
		if _, ok := left[v.ID]; ok {
			continue
		}
		if err := l.rebuild(ctx, v); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Rebuild puts the voucher back in the cache from the database: its window,
// its buyers (its created orders, and the orders still queued), and the
// stock they leave. It does nothing to a voucher the cache holds, so
// concurrent rebuilds, here or in other instances, are harmless. Calls for
// one voucher in this process share one rebuild, which runs apart from
// their contexts (bounded by RebuildTimeout): a caller that goes away
// fails nobody else. A voucher whose sale ended longer than the retention
// ago is not rebuilt: seckill.ErrEnded. Any other failure is seckill.ErrUnavailable, but
// seckill.ErrVoucherNotFound.
func (l *Ledger) Rebuild(ctx context.Context, id int64) error {
	return l.rebuildShared(ctx, id, context.WithoutCancel(ctx))
}

// rebuildShared is Rebuild with the rebuild's own work bounded by work's
// context (a background rebuild that stops with its owner), the caller's
// wait by ctx.
func (l *Ledger) rebuildShared(ctx context.Context, id int64, work context.Context) error {
	ch := l.rebuilds.DoChan(strconv.FormatInt(id, 10), func() (any, error) {
		rctx, cancel := context.WithTimeout(work, l.rebuildTimeout())
		defer cancel()
		v, err := l.Vouchers.Store.Voucher(rctx, id)
		if err != nil {
			return nil, err
		}
		l.Vouchers.Remember(v)
		retention := l.Vouchers.RetentionOrDefault()
		if !l.now().Before(v.EndTime.Add(retention)) {
			// Its keys were deleted, or soon will be, once its orders were
			// all written: nothing will read a stream made again.
			return nil, seckill.Errorf(seckill.ErrEnded, "the sale of voucher %d ended more than %v ago: it is not kept in Redis", id, retention)
		}
		return nil, l.rebuild(rctx, v)
	})
	select {
	case r := <-ch:
		if r.Err != nil && !errors.Is(r.Err, seckill.ErrVoucherNotFound) && !errors.Is(r.Err, seckill.ErrUnavailable) && !errors.Is(r.Err, seckill.ErrEnded) {
			return fmt.Errorf("%w: %w", seckill.ErrUnavailable, r.Err)
		}
		return r.Err
	case <-ctx.Done():
		return fmt.Errorf("rebuild voucher %d: %w: %w", id, seckill.ErrUnavailable, ctx.Err())
	}
}

// defaultRebuildTimeout is Ledger.RebuildTimeout's default.
const defaultRebuildTimeout = 10 * time.Minute

func (l *Ledger) rebuildTimeout() time.Duration {
	return orDefault(l.RebuildTimeout, defaultRebuildTimeout)
}

// rebuild is Rebuild's work, for a voucher read already.
func (l *Ledger) rebuild(ctx context.Context, v *seckill.Voucher) error {
	for try := 0; ; try++ {
		res, err := l.Cache.Rebuild(ctx, v, l.Vouchers.Store.VoucherOrders)
		if err != nil {
			return fmt.Errorf("rebuild voucher %d: %w", v.ID, err)
		}
		if !res.Done {
			return nil
		}
		l.Logger.Warn("voucher rebuilt in Redis from the database", "voucher", v.ID, "remaining", res.Remaining,
			"initial_stock", v.InitialStock, "replaced_other_generation", res.Replaced)
		// The stock was set from the initial stock of the row this rebuild
		// read, which may be older than an addition of stock committed
		// since (AddStock): a rebuild begun before it (a buyer's, a
		// repair's) and started over by the addition's unload, finishing
		// first, left the addition in the database only, and the
		// addition's own rebuild found that stock and set nothing (found
		// by review). The rebuild that set the stock reads the row again,
		// and takes the stock anew from a row that grew.
		row, err := l.Vouchers.Store.Voucher(ctx, v.ID)
		if err != nil || row.InitialStock <= v.InitialStock {
			return nil // unread: the addition's retry or reconcile puts it right
		}
		if try == 2 {
			l.Logger.Error("voucher's stock grew during three rebuilds: Redis may hold less than the database until reconcile --repair", "voucher", v.ID)
			return nil
		}
		l.Vouchers.Remember(row)
		if err := l.Cache.UnloadStock(ctx, v.ID); err != nil {
			return fmt.Errorf("rebuild voucher %d: take the added stock: %w", v.ID, err)
		}
		v = row
	}
}
