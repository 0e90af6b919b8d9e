package seckill

import (
	"context"
	"time"
)

// OrderStatus is where an order stands on its way to the database.
type OrderStatus string

// The statuses of an order. Pending is never stored: it is what an order
// admitted in Redis but not yet in the database reports.
const (
	OrderPending OrderStatus = "pending"
	OrderCreated OrderStatus = "created"
	OrderFailed  OrderStatus = "failed"
)

// Order is one buyer's purchase of one voucher. Its ID is made by the
// service, not by the database, so that it can be answered before the order
// is written.
type Order struct {
	ID        int64
	UserID    int64
	VoucherID int64
	Status    OrderStatus
	// Reason says why a failed order failed.
	Reason    string
	CreatedAt time.Time
}

// OrderCounter counts a voucher's orders in the database.
type OrderCounter interface {
	// CountOrders returns how many orders of the voucher the database holds,
	// whatever their status.
	CountOrders(ctx context.Context, voucherID int64) (int64, error)
}

// SaveOutcome is what [OrderStore.SaveOrders] did with one order.
type SaveOutcome int

// The outcomes of saving an order.
const (
	// Saved: the order was inserted now and its voucher's stock decremented.
	Saved SaveOutcome = iota + 1
	// AlreadySaved: an order with this id, buyer and voucher was already
	// there; a redelivery, nothing changed.
	AlreadySaved
	// BuyerConflict: the buyer already has a different order of this
	// voucher; nothing changed. Redis admitted the buyer twice.
	BuyerConflict
	// IDConflict: the id belongs to an order of another buyer or voucher;
	// nothing changed.
	IDConflict
)

func (o SaveOutcome) String() string {
	switch o {
	case Saved:
		return "saved"
	case AlreadySaved:
		return "already_saved"
	case BuyerConflict:
		return "buyer_conflict"
	case IDConflict:
		return "id_conflict"
	}
	return "unknown"
}

// OrderStore keeps orders in the database.
type OrderStore interface {
	OrderCounter
	// SaveOrders writes orders with status created in one transaction and
	// returns an outcome for each, in order. An order is inserted only if
	// neither its id nor its (buyer, voucher) pair exists, so saving the
	// same orders again changes nothing (G4). Each voucher's stock drops by
	// the number of its orders inserted; if that would take it below zero,
	// or a voucher does not exist, nothing is written and the error wraps
	// ErrSoldOut or ErrVoucherNotFound.
	SaveOrders(ctx context.Context, orders []*Order) ([]SaveOutcome, error)
	// Order returns the order with the id, or ErrOrderNotFound.
	Order(ctx context.Context, id int64) (*Order, error)
	// UserOrders returns up to limit of the user's orders, newest first.
	UserOrders(ctx context.Context, userID int64, limit int) ([]*Order, error)
}
