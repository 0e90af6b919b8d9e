package redisledger

import (
	"context"
	"fmt"

	"github.com/seckill/seckill"
)

// Load puts a voucher just created into Redis (seckill.VoucherLedger):
// state of another generation of its id is replaced, state of this one
// (rebuilt by a buyer first) kept.
func (l *Ledger) Load(ctx context.Context, v *seckill.Voucher) error {
	_, err := l.Cache.LoadVoucher(ctx, v)
	return err
}

// Remaining returns the stock left in Redis of each of vs that it holds
// (seckill.VoucherLedger).
func (l *Ledger) Remaining(ctx context.Context, vs ...*seckill.Voucher) (map[int64]int64, error) {
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	left, err := l.Cache.Remaining(ctx, ids...)
	if err != nil {
		return nil, fmt.Errorf("read remaining stock: %w", err)
	}
	return left, nil
}

// MaxShards is how many shards a voucher may have (seckill.VoucherLedger):
// seckill.MaxShards with the stream, 1 with the queue mode's queue, whose
// workers know one queue per voucher.
func (l *Ledger) MaxShards() (int, string) {
	if l.Queued {
		return 1, "the queue mode keeps a voucher's stock in one place; only the stream mode splits it over shards"
	}
	return seckill.MaxShards, "at most seckill's MaxShards"
}

// Repair puts the voucher back in Redis from the database, for a
// reconciliation that found them apart (seckill.Reconciler): its stock
// (and, but in the queue mode, its buyers) unloaded, then rebuilt.
func (l *Ledger) Repair(ctx context.Context, voucherID int64) error {
	unload := l.Cache.Unload
	if l.Queued {
		unload = l.Cache.UnloadStock
	}
	if err := unload(ctx, voucherID); err != nil {
		return err
	}
	return l.Rebuild(ctx, voucherID)
}

// ReturnUnit gives a cancelled order's unit back to the voucher's stock in
// Redis, on the buyer's home shard, if the buyer's slot still holds the
// order (seckill.UnitReturner).
func (l *Ledger) ReturnUnit(ctx context.Context, v *seckill.Voucher, userID, orderID int64) (bool, error) {
	return l.Cache.ReturnUnit(ctx, v, userID, orderID)
}
