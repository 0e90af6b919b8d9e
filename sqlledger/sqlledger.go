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
func (l *Ledger) Admit(ctx context.Context, o seckill.Order) (seckill.OrderStatus, error) {
	o.Status = seckill.OrderCreated
	if err := l.Store.PlaceOrder(ctx, &o, l.Clock.Now()); err != nil {
		return "", fmt.Errorf("buy voucher %d: %w", o.VoucherID, err)
	}
	return seckill.OrderCreated, nil
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

// Remaining returns nil: the rows are the sale, and what remains of each
// voucher is its row's stock (seckill.VoucherLedger).
func (l *Ledger) Remaining(context.Context, ...*seckill.Voucher) (map[int64]int64, error) {
	return nil, nil
}

// Control makes the control in the database, which is all admission
// reads: its row lock orders the controls (seckill.VoucherLedger). What
// remains is the stock of the row it wrote.
func (l *Ledger) Control(ctx context.Context, _ int64, _ seckill.Control, write func(context.Context) (*seckill.Voucher, error)) (*seckill.VoucherView, error) {
	v, err := write(ctx)
	if err != nil {
		return nil, err
	}
	return &seckill.VoucherView{Voucher: v, Remaining: &v.Stock}, nil
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
