package seckill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// CountOrders returns how many created orders of the voucher the
	// database holds: the stock they took. Failed orders do not count.
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
	// FailOrder records o as failed, with o.Reason, unless an order with its
	// id is already recorded (created or failed): then it changes nothing.
	// Failed orders are kept apart from created ones, so they neither take
	// stock nor hold the buyer's (user, voucher) slot.
	FailOrder(ctx context.Context, o *Order) error
	// Order returns the order with the id, created or failed, or
	// ErrOrderNotFound. An id both created and failed is created.
	Order(ctx context.Context, id int64) (*Order, error)
	// UserOrders returns up to limit of the user's orders, created and
	// failed, newest (highest id) first.
	UserOrders(ctx context.Context, userID int64, limit int) ([]*Order, error)
	// VoucherOrders returns up to limit created orders of the voucher whose
	// id is above afterID, by id ascending: a page of the buyers that
	// Redis must know when it is rebuilt.
	VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*Order, error)
	// OrderStatuses returns the status of each of ids that the database
	// holds; ids it does not hold are absent.
	OrderStatuses(ctx context.Context, ids []int64) (map[int64]OrderStatus, error)
}

// OrderCache is the Redis side of orders: admission, and who holds which
// order before the database does.
type OrderCache interface {
	// Admit admits the user to the voucher's sale with orderID, atomically:
	// window, stock, one per buyer. It returns nil if admitted; else an
	// error of kind ErrDuplicateOrder (with the buyer's order id),
	// ErrSoldOut, ErrNotStarted, ErrEnded or ErrVoucherNotLoaded; or
	// ErrUnavailable when the outcome is unknown.
	Admit(ctx context.Context, voucherID, userID, orderID int64) error
	// BuyerOrders returns the user's order id in each of the vouchers where
	// the cache records one.
	BuyerOrders(ctx context.Context, userID int64, voucherIDs ...int64) (map[int64]int64, error)
}

// IDGenerator makes order ids (package orderid).
type IDGenerator interface {
	Next() (int64, error)
}

// OrderService takes buyers' orders and tells them where their orders stand.
type OrderService struct {
	Cache    OrderCache
	Store    OrderStore
	Vouchers *VoucherService
	IDs      IDGenerator
	Logger   *slog.Logger
	// OrderTime returns the time an order id was made (orderid.Time).
	OrderTime func(id int64) time.Time
	// Lookup bounds the look-up of a buyer's order after an admission whose
	// outcome was not heard. Default 1s.
	Lookup time.Duration
}

// Buy admits the user to the voucher's sale and returns their order,
// pending until a worker writes it to the database. Asking again returns
// the same order, as ErrDuplicateOrder with its id (G5).
func (s *OrderService) Buy(ctx context.Context, userID, voucherID int64) (*Order, error) {
	id, err := s.IDs.Next()
	if err != nil {
		return nil, &Error{Kind: ErrUnavailable, Message: "cannot take orders right now; try again", RetryAfter: time.Second}
	}
	err = s.Cache.Admit(ctx, voucherID, userID, id)
	if errors.Is(err, ErrVoucherNotLoaded) {
		// Redis lost the voucher, or never had it: rebuild it from the
		// database, then admit.
		if err := s.Vouchers.Rebuild(ctx, voucherID); err != nil {
			return nil, fmt.Errorf("buy voucher %d: %w", voucherID, err)
		}
		err = s.Cache.Admit(ctx, voucherID, userID, id)
	}
	switch {
	case err == nil:
		return s.pending(id, userID, voucherID), nil
	case errors.Is(err, ErrUnavailable):
		return s.unknownOutcome(ctx, id, userID, voucherID, err)
	case errors.Is(err, ErrVoucherNotLoaded):
		// Rebuilt, and gone again at once: Redis is in trouble.
		return nil, &Error{Kind: ErrUnavailable, Message: "the sale is being restored; try again", RetryAfter: time.Second}
	}
	return nil, err
}

// unknownOutcome settles an admission whose answer was lost: the script
// may have run. Admission records the buyer with the order, so reading the
// buyer's entry tells; only if that fails too is the outcome unknown.
func (s *OrderService) unknownOutcome(ctx context.Context, id, userID, voucherID int64, cause error) (*Order, error) {
	wait := s.Lookup
	if wait <= 0 {
		wait = time.Second
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	found, err := s.Cache.BuyerOrders(lctx, userID, voucherID)
	if err != nil {
		s.Logger.Warn("admission outcome unknown", "voucher", voucherID, "user", userID, "err", cause, "lookup_err", err)
		return nil, &Error{Kind: ErrUnavailable, Message: "your order's outcome is not known yet; try again, you will not buy twice", RetryAfter: time.Second}
	}
	existing, ok := found[voucherID]
	if !ok {
		return nil, &Error{Kind: ErrUnavailable, Message: "your order was not taken; try again", RetryAfter: time.Second}
	}
	if existing != id {
		return nil, &Error{Kind: ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: existing}
	}
	return s.pending(id, userID, voucherID), nil
}

func (s *OrderService) pending(id, userID, voucherID int64) *Order {
	return &Order{ID: id, UserID: userID, VoucherID: voucherID, Status: OrderPending, CreatedAt: s.OrderTime(id)}
}

// Order returns the user's order with the id: created or failed from the
// database, else pending if Redis holds it as the user's. Another user's
// order is ErrOrderNotFound, as is an unknown one (G8).
func (s *OrderService) Order(ctx context.Context, userID, id int64) (*Order, error) {
	o, err := s.Store.Order(ctx, id)
	switch {
	case err == nil:
		if o.UserID != userID {
			return nil, Errorf(ErrOrderNotFound, "order %d not found", id)
		}
		return o, nil
	case !errors.Is(err, ErrOrderNotFound):
		return nil, fmt.Errorf("get order %d: %w", id, err)
	}
	pending, err := s.pendingOrders(ctx, userID)
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		if p.ID == id {
			return p, nil
		}
	}
	// Written between the two reads? Look once more.
	if o, err := s.Store.Order(ctx, id); err == nil && o.UserID == userID {
		return o, nil
	}
	return nil, Errorf(ErrOrderNotFound, "order %d not found", id)
}

// Orders returns up to limit of the user's orders, newest first: those in
// the database and those still pending.
func (s *OrderService) Orders(ctx context.Context, userID int64, limit int) ([]*Order, error) {
	stored, err := s.Store.UserOrders(ctx, userID, limit)
	if err != nil {
		return nil, fmt.Errorf("list orders: %w", err)
	}
	pending, err := s.pendingOrders(ctx, userID)
	if err != nil {
		return nil, err
	}
	have := make(map[int64]bool, len(stored))
	for _, o := range stored {
		have[o.ID] = true
	}
	all := stored
	for _, p := range pending {
		if !have[p.ID] {
			all = append(all, p)
		}
	}
	slices.SortFunc(all, func(a, b *Order) int { return cmp.Compare(b.ID, a.ID) })
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	return all, nil
}

// pendingOrders returns the orders Redis holds for the user in the vouchers
// on sale that the database does not hold yet. It reads only: nothing on
// the admission path writes for it.
func (s *OrderService) pendingOrders(ctx context.Context, userID int64) ([]*Order, error) {
	ids, err := s.Vouchers.OpenIDs(ctx)
	if err != nil {
		return nil, err
	}
	found, err := s.Cache.BuyerOrders(ctx, userID, ids...)
	if err != nil {
		return nil, fmt.Errorf("read pending orders: %w", err)
	}
	if len(found) == 0 {
		return nil, nil
	}
	orderIDs := make([]int64, 0, len(found))
	for _, id := range found {
		orderIDs = append(orderIDs, id)
	}
	stored, err := s.Store.OrderStatuses(ctx, orderIDs)
	if err != nil {
		return nil, fmt.Errorf("read pending orders: %w", err)
	}
	var out []*Order
	for voucherID, id := range found {
		if _, ok := stored[id]; !ok {
			out = append(out, s.pending(id, userID, voucherID))
		}
	}
	return out, nil
}
