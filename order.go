package seckill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/seckill/seckill/internal/cow"
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

// OrderCache is the Redis side of orders: admission, and who holds which
// order before the database does.
type OrderCache interface {
	// Admit admits the user to the voucher's sale with the order id,
	// atomically: window, stock, one per buyer, and the order appended to
	// the voucher's stream. It returns nil if admitted; else an error of
	// kind ErrDuplicateOrder (with the buyer's order id), ErrSoldOut,
	// ErrNotStarted, ErrEnded, ErrVoucherNotLoaded (not loaded, or loaded
	// for another generation) or ErrCacheUnverified (nothing ran: the cache
	// server must be checked first); or ErrUnavailable when the outcome is
	// unknown.
	Admit(ctx context.Context, a Admission) error
	// Reserve is Admit without the stream: the queue mode's admission.
	Reserve(ctx context.Context, a Admission) error
	// Release gives back what an admission of orderID took, if the buyer's
	// slot still holds it, and reports whether it did.
	Release(ctx context.Context, voucherID, userID, orderID int64) (bool, error)
	// BuyerOrder returns the user's order id in the voucher if the cache
	// records one, else 0: BuyerOrders of one voucher, without a map.
	BuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error)
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
	// Mode is how orders are taken; default ModeStream.
	Mode  Mode
	Cache OrderCache
	Store OrderStore
	// Admitter admits in the cache (not in the sync mode).
	Admitter *Admitter
	// Vouchers tells which vouchers are open (a buyer's pending orders).
	Vouchers *VoucherService
	// SoldOut reads a buyer's slot of a voucher found sold out: from a
	// copy kept true (package soldout), or from the cache, fenced
	// (redis.Client). The sold-out memory (SoldOutFor) answers only through
	// it: nil turns the memory off, and every buy runs the admission. (An
	// unfenced read of the slot could tell a buyer who holds an order
	// sold_out, after Redis came back older.)
	SoldOut SoldOutReader
	IDs     IDGenerator
	// Queue is the queue mode's queue.
	Queue OrderQueue
	// Backpressure, if set, pauses admission to a voucher whose stream
	// holds too many orders (the stream mode's workers).
	Backpressure Backpressure
	Logger       *slog.Logger
	// Now returns the current time. Default time.Now.
	Now func() time.Time
	// OrderTime returns the time an order id was made (orderid.Time).
	OrderTime func(id int64) time.Time
	// SoldOutFor is how long a voucher found sold out is answered sold out
	// here without running the admission: most buyers of a flash sale ask
	// after the stock is gone. Only the fact is kept; a buyer asking again
	// still gets their order back (G5), read from their own slot in the
	// cache (one HGET). Stock given back (a dead letter, a repair) is sold
	// again after at most this long. Default 1s; negative turns it off.
	SoldOutFor time.Duration
	// Confirmed says the cache confirms every admission with replicas
	// before answering it (redis: Config.WaitReplicas > 0): an order found
	// in a buyer's slot by a plain read may then be one no replica has, and
	// a failover would lose it. Such a buyer is answered through the
	// admission (which confirms the order it names), never from the read.
	Confirmed bool

	soldOut cow.Map[int64, soldOutEntry]
}

// SoldOutReader reads the slots of a voucher found sold out, from a copy
// it keeps true without a round trip (soldout.Copies), or from the cache
// (redis.Client).
type SoldOutReader interface {
	// SoldOutBuyerOrder is OrderCache.BuyerOrder for a voucher the caller
	// found sold out, read only from a server checked since it came up
	// (else ErrCacheUnverified) and while the voucher (of a sharded one,
	// the buyer's home shard) is loaded (else ErrVoucherNotLoaded).
	SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error)
}

// Buy takes the user's order of the voucher. In the stream and queue modes
// the order is pending until a worker writes it to the database; in the
// sync mode it is created. Asking again returns the same order, as
// ErrDuplicateOrder with its id (G5).
func (s *OrderService) Buy(ctx context.Context, userID, voucherID int64) (*Order, error) {
	id, err := s.IDs.Next()
	if err != nil {
		// No order id to admit with (the node lease is being renewed, after
		// Redis lost it): a buyer who holds an order is told of it all the
		// same; the others try again. Not sold out from the memory below:
		// Redis may have lost the slot of a buyer who holds an order, and
		// sold_out is a final answer.
		if s.Mode != ModeSync && !s.Confirmed {
			if existing, err := s.Cache.BuyerOrder(ctx, userID, voucherID); err == nil && existing != 0 {
				return nil, duplicate(existing)
			}
		}
		return nil, &Error{Kind: ErrUnavailable, Message: "cannot take orders right now; try again", RetryAfter: time.Second}
	}
	if s.Mode == ModeSync {
		o := s.pending(id, userID, voucherID)
		o.Status = OrderCreated
		if err := s.Store.PlaceOrder(ctx, o, s.now()); err != nil {
			return nil, fmt.Errorf("buy voucher %d: %w", voucherID, err)
		}
		return o, nil
	}
	fence := s.Admitter.Fence.seen.load()
	if s.SoldOut != nil && s.knownSoldOut(voucherID, fence) {
		err := s.soldOutAnswer(ctx, userID, voucherID)
		if err != nil && (!s.Confirmed || !errors.Is(err, ErrDuplicateOrder)) {
			return nil, err
		}
		// A buyer with an order: the admission below confirms it. Or
		// (nil) the cache server is not checked: the admission checks it.
	}
	if s.Backpressure != nil && s.Backpressure.Refusing(voucherID, userID) {
		return nil, &Error{Kind: ErrUnavailable, Message: "too many orders are waiting to be written; try again shortly", RetryAfter: time.Second}
	}
	err = s.Admitter.Admit(ctx, Admission{VoucherID: voucherID, UserID: userID, OrderID: id})
	switch {
	case err == nil && s.Mode == ModeQueue:
		// Queued here also when found admitted after a lost answer: the
		// admission that took it never got to.
		return s.enqueue(ctx, s.pending(id, userID, voucherID))
	case err == nil:
		return s.pending(id, userID, voucherID), nil
	case errors.Is(err, ErrSoldOut):
		s.noteSoldOut(voucherID, fence)
	}
	return nil, err
}

// soldOutEntry is what the sold-out memory (OrderService.soldOut) knows
// of a voucher: until when it is known sold out, and the word of fenceSeen
// it was learnt under. The memory changes about once a second per voucher
// on sale, and is read by every buy.
type soldOutEntry struct {
	until int64  // Unix ns
	fence uint64 // fenceSeen's word when it was found sold out
}

// setSoldOut makes the voucher known sold out as e; an e.until of 0
// forgets it, if it is still was. Expired entries are dropped.
func (s *OrderService) setSoldOut(voucherID int64, e, was soldOutEntry, now int64) {
	s.soldOut.Update(func(next map[int64]soldOutEntry) bool {
		if e.until == 0 && next[voucherID] != was {
			return false // renewed meanwhile
		}
		for id, o := range next {
			if o.until <= now {
				delete(next, id)
			}
		}
		if e.until != 0 {
			next[voucherID] = e
		} else {
			delete(next, voucherID)
		}
		return true
	})
}

// knownSoldOut reports whether the voucher was found sold out less than
// SoldOutFor ago, while this process has seen the cache server checked
// (fenceSeen) without a doubt since: fence is the word now. An entry that
// has expired, or was learnt under another word, is dropped: a server that
// came back with older data may have stock, and lack the slot of a buyer
// who holds an order.
func (s *OrderService) knownSoldOut(voucherID int64, fence uint64) bool {
	e, _ := s.soldOut.Load(voucherID)
	if e.until == 0 {
		return false
	}
	now := s.now().UnixNano()
	if now < e.until && e.fence == fence && checkedIn(fence) {
		return true
	}
	s.setSoldOut(voucherID, soldOutEntry{}, e, now)
	return false
}

// noteSoldOut remembers that the voucher is sold out, for SoldOutFor, as
// learnt under the word fence of fenceSeen (read before the admission).
// A sharded voucher is so only when the Admitter found every shard at 0
// with nothing in flight (Admitter.borrow), not when the buyer's home
// shard alone was; its buyers are then answered from their home shards'
// slots (SoldOutReader).
func (s *OrderService) noteSoldOut(voucherID int64, fence uint64) {
	wait := s.SoldOutFor
	if wait == 0 {
		wait = time.Second
	}
	if wait > 0 && checkedIn(fence) && s.SoldOut != nil {
		now := s.now().UnixNano()
		s.setSoldOut(voucherID, soldOutEntry{until: now + int64(wait), fence: fence}, soldOutEntry{}, now)
	}
}

// soldOutAnswer answers a buyer of a voucher known sold out: their own
// order if they have one (G5), read from their slot or the cache's copy;
// else sold out. It returns nil when the cache cannot vouch for the slot,
// and the caller admits: its server is not checked (ErrCacheUnverified: it
// may have come back with older data; the memory is then doubted, and the
// admission checks the server), or the voucher is not loaded
// (ErrVoucherNotLoaded: its data lost, or being rebuilt; the memory of it
// is dropped, and the admission rebuilds it).
func (s *OrderService) soldOutAnswer(ctx context.Context, userID, voucherID int64) error {
	existing, err := s.SoldOut.SoldOutBuyerOrder(ctx, userID, voucherID)
	switch {
	case errors.Is(err, ErrCacheUnverified):
		s.Admitter.Fence.seen.doubt()
		return nil
	case errors.Is(err, ErrVoucherNotLoaded):
		e, _ := s.soldOut.Load(voucherID)
		s.setSoldOut(voucherID, soldOutEntry{}, e, s.now().UnixNano())
		return nil
	case err != nil:
		return &Error{Kind: ErrUnavailable, Message: "cannot read your order right now; try again", RetryAfter: time.Second}
	case existing != 0:
		return duplicate(existing)
	}
	return &Error{Kind: ErrSoldOut, Message: "voucher " + strconv.FormatInt(voucherID, 10) + " is sold out"}
}

// duplicate is the answer to a buyer who holds an order of the voucher
// already: that order (G5).
func duplicate(orderID int64) error {
	return &Error{Kind: ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: orderID}
}

// enqueue puts a reserved order on the queue mode's queue; a full queue
// gives the reservation back and answers unavailable.
func (s *OrderService) enqueue(ctx context.Context, o *Order) (*Order, error) {
	if s.Queue.Offer(o) {
		return o, nil
	}
	if _, err := s.Cache.Release(context.WithoutCancel(ctx), o.VoucherID, o.UserID, o.ID); err != nil {
		s.Logger.Error("queue full, and the reservation could not be given back; run seckill reconcile", "voucher", o.VoucherID, "order", o.ID, "err", err)
	}
	return nil, &Error{Kind: ErrUnavailable, Message: "too many orders at once; try again", RetryAfter: time.Second}
}

func (s *OrderService) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
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
		return o, nil
	case !errors.Is(err, ErrOrderNotFound):
		return nil, fmt.Errorf("get order %d: %w", id, err)
	}
	pending, _, err := s.pendingOrders(ctx, userID)
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
	return all, nil
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
	found, err := s.Cache.BuyerOrders(ctx, userID, ids...)
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
