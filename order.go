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

// The statuses of an order (docs/design/lifecycle.md, Order lifecycle). Pending is
// never stored: it is what an order admitted in Redis but not yet in the
// database reports. Created and paid orders hold a unit; a cancelled one
// gave its unit back; refunding and refunded are cancelled orders whose
// payment came after all, to be given back.
const (
	OrderPending   OrderStatus = "pending"
	OrderCreated   OrderStatus = "created"
	OrderFailed    OrderStatus = "failed"
	OrderPaid      OrderStatus = "paid"
	OrderCancelled OrderStatus = "cancelled"
	OrderRefunding OrderStatus = "refunding"
	OrderRefunded  OrderStatus = "refunded"
)

// HoldsUnit reports whether an order of the status holds a unit of its
// voucher's stock: created and paid orders do.
func (s OrderStatus) HoldsUnit() bool {
	return s == OrderCreated || s == OrderPaid
}

// Cancelled reports whether an order of the status was cancelled: its unit
// given back (cancelled, and then refunding or refunded if paid late).
func (s OrderStatus) Cancelled() bool {
	return s == OrderCancelled || s == OrderRefunding || s == OrderRefunded
}

// Order is one buyer's purchase of one voucher. Its ID is made by the
// service, not by the database, so that it can be answered before the order
// is written.
type Order struct {
	ID        int64
	UserID    int64
	VoucherID int64
	Status    OrderStatus
	// Reason says why a failed order failed, or a cancelled one was
	// cancelled (ReasonBuyerCancelled, ReasonNotPaid).
	Reason    string
	CreatedAt time.Time
	// PayBy is when a created order is cancelled if not paid: its
	// voucher's PayWithin after it was written to the database (or after
	// CreatedAt, if later): a pending order cannot be paid, so a backlog
	// does not eat its buyer's time. Zero when the voucher has no deadline
	// (and for pending and failed orders).
	PayBy time.Time
	// PaidAt is when a payment was recorded (paid, refunding, refunded).
	PaidAt time.Time
	// CancelledAt is when a cancelled (refunding, refunded) order was
	// cancelled.
	CancelledAt time.Time
	// PaymentRef is the payment provider's reference of the order's
	// payment, once one was started or recorded.
	PaymentRef string
	// PaymentStartedAt is when its buyer first started paying it with a
	// provider that confirms later, before its PayBy: the sweeper then
	// holds it for the payment grace after PayBy. Zero if never.
	PaymentStartedAt time.Time
	// Returned says the unit of a cancelled order is back on sale in the
	// cache, as well as in the database (which takes it back with the
	// cancellation). False between the two, after a crash in between.
	Returned bool
	// Amount is what the buyer owes, in Currency's minor units: its
	// voucher's price, which the database copies from the voucher's row as
	// it writes the order (OrderStore.SaveOrders, PlaceOrder). Currency ""
	// is read for an order not written (pending, failed) and for one of a
	// voucher made before prices: OrderService shows those its voucher's
	// price and currency.
	Amount   int64
	Currency string
}

// OrderCounter counts a voucher's orders in the database.
type OrderCounter interface {
	// CountOrders returns how many orders of the voucher the database
	// holds that hold a unit (created and paid): the stock they took.
	// Failed and cancelled orders do not count.
	CountOrders(ctx context.Context, voucherID int64) (int64, error)
	// CountFailedOrders returns how many of the voucher's orders the
	// database holds as failed, and not created after all.
	CountFailedOrders(ctx context.Context, voucherID int64) (int64, error)
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
	// neither its id nor its (buyer, voucher) pair exists (a cancelled
	// order holds the pair unless its voucher has RebuyAfterCancel), so saving the
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
	// Order returns the order with the id, in whatever status the database
	// holds it (created, paid, cancelled, refunding, refunded, or failed),
	// with PayBy filled in from its voucher, or ErrOrderNotFound. An id
	// both written and failed is the written one.
	Order(ctx context.Context, id int64) (*Order, error)
	// UserOrders returns up to limit of the user's orders, written and
	// failed, newest (highest id) first.
	UserOrders(ctx context.Context, userID int64, limit int) ([]*Order, error)
	// VoucherOrders returns up to limit orders of the voucher whose id is
	// above afterID, by id ascending, in every status but failed: a page of
	// what Redis must know when it is rebuilt. Created and paid orders hold
	// a unit; a cancelled (refunding, refunded) one holds its buyer's slot
	// alone, or, if its voucher lets a buyer buy again (RebuyAfterCancel),
	// nothing, and is listed so that Redis knows its unit went back.
	VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*Order, error)
	// OrderStatuses returns the status of each of ids that the database
	// holds; ids it does not hold are absent.
	OrderStatuses(ctx context.Context, ids []int64) (map[int64]OrderStatus, error)
	// PlaceOrder is the whole of an admission in the database, in one
	// transaction (the sync mode): it checks the voucher's sale window
	// against now and the buyer's existing order, inserts o as created and
	// takes one from the stock with a guarded update. It returns an error of
	// kind ErrVoucherNotFound, ErrNotStarted, ErrEnded, ErrDuplicateOrder
	// (an *Error with the buyer's order id) or ErrSoldOut, and then writes
	// nothing.
	PlaceOrder(ctx context.Context, o *Order, now time.Time) error
}

// Mode is how the service takes orders (docs/design/modes.md, Modes).
type Mode string

// The modes: the three stages of the design the product grew from.
const (
	// ModeSync takes each order in a database transaction in the request.
	ModeSync Mode = "sync"
	// ModeQueue admits in Redis and queues the order in memory for
	// workers: a crash loses the queue (kept to show why stream exists).
	ModeQueue Mode = "queue"
	// ModeStream admits in Redis and appends the order to a Redis Stream
	// that workers of a consumer group persist: nothing accepted is lost.
	ModeStream Mode = "stream"
)

// ParseMode returns the mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeSync, ModeQueue, ModeStream:
		return m, nil
	}
	return "", fmt.Errorf("mode %q: want sync, queue or stream", s)
}

// OrderQueue is the queue mode's in-process queue of admitted orders.
type OrderQueue interface {
	// Offer queues o unless the queue is full, and reports whether it did.
	Offer(o *Order) bool
}

// Admission is one buyer's try to buy one voucher with a new order id.
type Admission struct {
	VoucherID int64
	// Generation is the voucher's (Voucher.Generation): admission refuses
	// state that the cache holds for another generation of the id.
	Generation int64
	UserID     int64
	OrderID    int64
	// Shard is the buyer's home shard of the voucher (HomeShard), where
	// the buyer is admitted; 0 for an unsharded voucher.
	Shard int
}

// IDGenerator makes order ids (package orderid).
type IDGenerator interface {
	Next() (int64, error)
}

// OrderService takes buyers' orders and tells them where their orders stand.
type OrderService struct {
	// Ledger decides who may take a unit, and holds the orders on their
	// way to the database.
	Ledger Ledger
	Store  OrderStore
	// Vouchers tells which vouchers are open (a buyer's pending orders).
	Vouchers *VoucherService
	IDs      IDGenerator
	Logger   *slog.Logger
	// OrderTime returns the time an order id was made (orderid.Time).
	OrderTime func(id int64) time.Time
}

// Readmitter admits again the order of a dead letter: as a buy's
// admission, past what only buyers are answered from (the Redis ledger's
// sold-out memory and backpressure).
type Readmitter interface {
	Readmit(ctx context.Context, o *Order) error
}

// Buy takes the user's order of the voucher, through the Ledger: pending
// until a worker writes it to the database, or created when the ledger
// wrote it. Asking again returns the same order, as ErrDuplicateOrder with
// its id (G5).
func (s *OrderService) Buy(ctx context.Context, userID, voucherID int64) (*Order, error) {
	id, err := s.IDs.Next()
	if err != nil {
		// No order id to admit with (the node lease is being renewed, after
		// Redis lost it): a buyer who holds an order is told of it all the
		// same; the others try again. Not sold out: the ledger may have lost
		// the slot of a buyer who holds an order, and sold_out is a final
		// answer.
		if h, err := s.Ledger.HeldOrder(ctx, userID, voucherID); err == nil && h.OrderID != 0 && !h.Unconfirmed {
			return nil, duplicate(h.OrderID)
		}
		return nil, &Error{Kind: ErrUnavailable, Message: "cannot take orders right now; try again", RetryAfter: time.Second}
	}
	o := Order{ID: id, UserID: userID, VoucherID: voucherID, Status: OrderPending, CreatedAt: s.OrderTime(id)}
	status, err := s.Ledger.Admit(ctx, o)
	if err != nil {
		return nil, err
	}
	taken := o
	taken.Status = status
	return &taken, nil
}

// duplicate is the answer to a buyer who holds an order of the voucher
// already: that order (G5).
func duplicate(orderID int64) error {
	return &Error{Kind: ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: orderID}
}

func (s *OrderService) pending(id, userID, voucherID int64) *Order {
	return &Order{ID: id, UserID: userID, VoucherID: voucherID, Status: OrderPending, CreatedAt: s.OrderTime(id)}
}

// Order returns the user's order with the id: as the database holds it,
// else pending if Redis holds it as the user's. Another user's
// order is ErrOrderNotFound, as is an unknown one (G8).
func (s *OrderService) Order(ctx context.Context, userID, id int64) (*Order, error) {
	o, err := s.Store.Order(ctx, id)
	switch {
	case err == nil:
		if o.UserID != userID {
			return nil, Errorf(ErrOrderNotFound, "order %d not found", id)
		}
		return o, s.priced(ctx, o)
	case !errors.Is(err, ErrOrderNotFound):
		return nil, fmt.Errorf("get order %d: %w", id, err)
	}
	pending, _, err := s.pendingOrders(ctx, userID)
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		if p.ID == id {
			return p, s.priced(ctx, p)
		}
	}
	// Written between the two reads? Look once more.
	if o, err := s.Store.Order(ctx, id); err == nil && o.UserID == userID {
		return o, s.priced(ctx, o)
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
	pending, persisted, err := s.pendingOrders(ctx, userID)
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
	for _, id := range persisted {
		if have[id] || (limit > 0 && len(stored) >= limit && id < stored[len(stored)-1].ID) {
			continue // listed, or older than every order listed
		}
		// Persisted between the two reads: pending in neither, and stored
		// after the first. A buyer told to check their orders (an
		// admission not confirmed by replicas) must find it.
		o, err := s.Store.Order(ctx, id)
		switch {
		case err == nil && o.UserID == userID:
			all = append(all, o)
		case err != nil && !errors.Is(err, ErrOrderNotFound):
			return nil, fmt.Errorf("list orders: %w", err)
		}
	}
	slices.SortFunc(all, func(a, b *Order) int { return cmp.Compare(b.ID, a.ID) })
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	return all, s.priced(ctx, all...)
}

// priced sets the Amount and Currency of the orders that the database
// holds none for: a pending or failed order shows its voucher's price (what
// it owes once written), and one of a voucher made before prices (price
// 0) the default currency. The voucher's row is read once per process
// (VoucherService.Row).
func (s *OrderService) priced(ctx context.Context, os ...*Order) error {
	for _, o := range os {
		if o.Currency != "" {
			continue
		}
		v, err := s.Vouchers.Row(ctx, o.VoucherID)
		if err != nil {
			return fmt.Errorf("order %d: %w", o.ID, err)
		}
		o.Amount, o.Currency = v.Price, s.Vouchers.currencyOf(v)
	}
	return nil
}

// pendingOrders returns the orders Redis holds for the user in the vouchers
// on sale that the database does not hold yet, and the ids of those it
// does (persisted). It reads only: nothing on the admission path writes
// for it.
func (s *OrderService) pendingOrders(ctx context.Context, userID int64) (pending []*Order, persisted []int64, _ error) {
	ids, err := s.Vouchers.OpenVoucherIDs(ctx)
	if err != nil {
		return nil, nil, err
	}
	found, err := s.Ledger.HeldOrders(ctx, userID, ids...)
	if err != nil {
		return nil, nil, fmt.Errorf("read pending orders: %w", err)
	}
	if len(found) == 0 {
		return nil, nil, nil
	}
	orderIDs := make([]int64, 0, len(found))
	for _, id := range found {
		orderIDs = append(orderIDs, id)
	}
	stored, err := s.Store.OrderStatuses(ctx, orderIDs)
	if err != nil {
		return nil, nil, fmt.Errorf("read pending orders: %w", err)
	}
	for voucherID, id := range found {
		if _, ok := stored[id]; ok {
			persisted = append(persisted, id)
		} else {
			pending = append(pending, s.pending(id, userID, voucherID))
		}
	}
	return pending, persisted, nil
}
