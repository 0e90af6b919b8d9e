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
