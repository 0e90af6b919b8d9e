// Package sqlledger is the SQL ledger (seckill.Ledger) of the sync mode:
// admission is the store's one transaction in the request (check the
// window and the buyer, insert the order, take the unit with a guarded
// update), so the database is the ledger and keeps every buyer itself.
// It is the first of the designs the product grew from, kept to be
// measured beside the Redis ledger (docs/design/ledger.md).
package sqlledger

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill/seckill"
)

// Store is the part of the store the SQL ledger admits with.
type Store interface {
	// PlaceOrder is seckill.OrderStore's: the whole admission in one
	// transaction.
	PlaceOrder(ctx context.Context, o *seckill.Order, now time.Time) error
	// Voucher is seckill.VoucherStore's: the row whose stock remains.
	Voucher(ctx context.Context, id int64) (*seckill.Voucher, error)
}

// Ledger is the SQL ledger. Store is required.
type Ledger struct {
	Store Store
	// Clock tells the time the sale window is checked against.
	Clock seckill.Clock
}

var _ seckill.Ledger = (*Ledger)(nil)

// Admit writes o as created with its unit taken, or answers why not
// (seckill.Ledger).
func (l *Ledger) Admit(ctx context.Context, o *seckill.Order) error {
	o.Status = seckill.OrderCreated
	if err := l.Store.PlaceOrder(ctx, o, l.Clock.Now()); err != nil {
		return fmt.Errorf("buy voucher %d: %w", o.VoucherID, err)
	}
	return nil
}

// HeldOrder returns no order: the database keeps the buyers, and a buy
// answers a buyer's order from there (seckill.Ledger).
func (l *Ledger) HeldOrder(context.Context, int64, int64) (seckill.Held, error) {
	return seckill.Held{}, nil
}

// HeldOrders returns none: no order waits outside the database
// (seckill.Ledger).
func (l *Ledger) HeldOrders(context.Context, int64, ...int64) (map[int64]int64, error) {
	return nil, nil
}

// Load does nothing: the row is the sale (seckill.VoucherLedger).
func (l *Ledger) Load(context.Context, *seckill.Voucher) error { return nil }

// Remaining returns each voucher's stock as the database holds it now
// (seckill.VoucherLedger): the rows a caller passes may have been read a
// while ago (VoucherService.List keeps them), and the stock is what buys
// take.
func (l *Ledger) Remaining(ctx context.Context, vs ...*seckill.Voucher) (map[int64]int64, error) {
	left := make(map[int64]int64, len(vs))
	for _, v := range vs {
		row, err := l.Store.Voucher(ctx, v.ID)
		if err != nil {
			return nil, fmt.Errorf("read remaining stock: %w", err)
		}
		left[v.ID] = row.Stock
	}
	return left, nil
}

// Control makes the control in the database, which is all admission
// reads: its row lock orders the controls (seckill.VoucherLedger).
func (l *Ledger) Control(ctx context.Context, _ int64, _ seckill.Control, write func(context.Context) (*seckill.Voucher, error)) (*seckill.Voucher, error) {
	return write(ctx)
}

// Restore does nothing: nothing is kept outside the database
// (seckill.VoucherLedger).
func (l *Ledger) Restore(context.Context) error { return nil }

// MaxShards is 1: a voucher is one row (seckill.VoucherLedger).
func (l *Ledger) MaxShards() (int, string) {
	return 1, "the sync mode sells from the database's one row; only the stream mode splits a voucher's stock over shards"
}

// ReturnUnit gives nothing back: the cancellation's transaction took the
// unit back into the row's stock, the only one (seckill.UnitReturner).
func (l *Ledger) ReturnUnit(context.Context, *seckill.Voucher, int64, int64) (bool, error) {
	return false, nil
}
