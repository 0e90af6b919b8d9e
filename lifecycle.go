package seckill

import (
	"context"
	"errors"
	"time"
)

// The errors of an order's life after admission (docs/design/lifecycle.md, Order
// lifecycle), each a 409 with its own code.
var (
	// ErrOrderPending: the order is admitted but not yet in the database;
	// it can be paid or cancelled once it is (ask again after RetryAfter).
	ErrOrderPending = errors.New("order pending")
	// ErrOrderPaid: the order is paid, and cannot be cancelled.
	ErrOrderPaid = errors.New("order paid")
	// ErrOrderCancelled: the order was cancelled (by its buyer, or by its
	// deadline), and cannot be paid.
	ErrOrderCancelled = errors.New("order cancelled")
	// ErrOrderFailed: the order failed, and can be neither paid nor
	// cancelled.
	ErrOrderFailed = errors.New("order failed")
	// ErrNoDeadline: the order's voucher has no pay-by deadline
	// (PayWithin 0): its orders end created, as before payments existed.
	ErrNoDeadline = errors.New("no payment deadline")
	// ErrBadSignature: a payment webhook's signature is missing, wrong or
	// too old.
	ErrBadSignature = errors.New("bad signature")
)

// The reasons a cancelled order was cancelled (Order.Reason).
const (
	ReasonBuyerCancelled = "cancelled by the buyer"
	ReasonNotPaid        = "not paid by the deadline"
)

// Payment is a payment of an order, as recorded in the database.
type Payment struct {
	// Ref is the provider's reference of the payment.
	Ref string
	// At is when it was made.
	At time.Time
}

// LifecycleStore moves orders through their life after admission, each
// step one guarded transition in the database (status = 'created', or
// 'cancelled', in the WHERE), so that steps racing for one order end in
// exactly one of them.
type LifecycleStore interface {
	// PayOrder records a payment of the order: created → paid. A paid
	// order (or refunding, refunded) is left as it is: a payment recorded
	// twice changes nothing. A cancelled one becomes refunding: the payment
	// came after the cancellation, and is to be given back. It returns the
	// order as it then stands, or ErrOrderNotFound (not in the database:
	// perhaps pending). A failed order is ErrOrderNotFound too.
	PayOrder(ctx context.Context, id int64, p Payment) (*Order, error)
	// StartPayment records that the order's buyer started paying it at at,
	// with a provider that confirms later: the order is then held for the
	// payment grace after its PayBy (CancelDue). Only a created order's
	// first start is recorded; a later one changes nothing. It returns the
	// order as it then stands (paid or cancelled, if it was), or
	// ErrOrderNotFound.
	StartPayment(ctx context.Context, id int64, at time.Time) (*Order, error)
	// CancelOrder cancels the order with reason at the time at: created →
	// cancelled, and its unit back to the voucher's stock, in one
	// transaction. The cancelled order keeps its buyer's (user, voucher)
	// slot unless the voucher has RebuyAfterCancel. An order in any other
	// status is left as it is. It returns the order as it then stands, or
	// ErrOrderNotFound.
	CancelOrder(ctx context.Context, id int64, reason string, at time.Time) (*Order, error)
	// CancelUnpaid cancels the order, its PayBy passed, as CancelOrder
	// does with reason ReasonNotPaid at the time at, unless its payment
	// was started (PaymentStartedAt) and it was written at or after
	// startedBefore: held for the payment grace, as CancelDue holds it,
	// and left created. The hold is checked in the guarded update itself,
	// so that a start committed after the caller read the order holds it.
	// It returns the order as it then stands, or ErrOrderNotFound.
	CancelUnpaid(ctx context.Context, id int64, startedBefore, at time.Time) (*Order, error)
	// CancelDue cancels up to limit created orders of the voucher written
	// before before (their PayBy passed: an order's deadline counts from
	// when it was written, the later of its admission and its write, since
	// it cannot be paid before; orders written before migration 0007 are
	// never due), or, for an order whose payment was started
	// (PaymentStartedAt), written before startedBefore (the payment grace
	// after its PayBy passed too), as CancelOrder does, with reason ReasonNotPaid at the
	// time at, in one transaction, and returns them in PayBy order.
	// Orders another transaction holds are skipped (FOR UPDATE SKIP
	// LOCKED; SQLite has one writer), so that any number of sweepers may
	// run at once.
	CancelDue(ctx context.Context, voucherID int64, before, startedBefore, at time.Time, limit int) ([]*Order, error)
	// Unreturned returns up to limit cancelled (refunding, refunded) orders
	// of the voucher cancelled before before whose unit is not yet marked
	// returned to the cache (Order.Returned false).
	Unreturned(ctx context.Context, voucherID int64, before time.Time, limit int) ([]*Order, error)
	// MarkReturned marks the units of the orders returned to the cache.
	MarkReturned(ctx context.Context, ids []int64) error
	// RefundOrder records that a refunding order's payment was given back:
	// refunding → refunded. Any other status is left as it is. It returns
	// the order as it then stands, or ErrOrderNotFound.
	RefundOrder(ctx context.Context, id int64, at time.Time) (*Order, error)
	// RecordPaymentEvent records a payment provider's event by its id, and
	// reports whether it is new (false: seen already, a replay).
	RecordPaymentEvent(ctx context.Context, eventID string, orderID int64, at time.Time) (bool, error)
	// RefusePaymentEvent records a payment provider's event refused for
	// its amount or currency (PaymentService.Confirm), by its id, and
	// reports whether it is new (false: refused already, a replay).
	RefusePaymentEvent(ctx context.Context, r *RefusedPayment) (bool, error)
	// PaymentEventSeen says what the database holds of a payment
	// provider's event id: recorded (RecordPaymentEvent), refused
	// (RefusePaymentEvent), or neither (PaymentEventNew). Ids compare
	// exactly. An id in both (possible only by a version before this
	// look-up) is PaymentEventRecorded: it was acted on.
	PaymentEventSeen(ctx context.Context, eventID string) (PaymentEventState, error)
	// RefusedPayments returns up to limit refused payment events, the
	// latest refused first.
	RefusedPayments(ctx context.Context, limit int) ([]*RefusedPayment, error)
	// ClaimRefunds claims up to limit refund requests due at now: refunding
	// orders whose next attempt is at or before now, or not set (an order a
	// binary from before the refund retry made refunding), the earliest
	// due first. Each claimed one's next
	// attempt moves to until and its attempts count one more, in one
	// transaction that skips the rows another holds (FOR UPDATE SKIP
	// LOCKED; SQLite has one writer), so that of any number of instances
	// one asks for each refund at a time, and a refund whose asker died is
	// due again at until. PayOrder makes a refund request due when it
	// makes an order refunding.
	ClaimRefunds(ctx context.Context, now, until time.Time, limit int) ([]*RefundRequest, error)
	// ClaimRefund claims the order's refund request as ClaimRefunds does,
	// if it is due; nil if not (not refunding, accepted, or claimed). It
	// waits for a row another transaction holds instead of skipping it:
	// the payment that made the order refunding asks at once, and a short
	// transaction on the row must not put that off to the loop's next pass.
	ClaimRefund(ctx context.Context, id int64, now, until time.Time) (*RefundRequest, error)
	// RefundAccepted records that the provider accepted the order's refund
	// request at the time at (the first acceptance's time is kept): it is
	// asked for again at next, unless refunded by then (the provider's
	// refund event lost).
	RefundAccepted(ctx context.Context, id int64, at, next time.Time) error
	// RefundFailed records that a refund request failed with reason (at
	// most 500 bytes): it is due again at next, unless refunded meanwhile.
	RefundFailed(ctx context.Context, id int64, next time.Time, reason string) error
	// RefundsWaiting counts the refunding orders (the payment still held,
	// accepted or not), and returns up to limit of them, the longest
	// waiting first, with when the oldest was paid (zero if none).
	RefundsWaiting(ctx context.Context, limit int) (*RefundsWaiting, error)
	// DeadlineVouchers returns the vouchers with a pay-by deadline
	// (PayWithin > 0) that can still have due orders or unreturned units,
	// newest first: those the sweeper looks at. A voucher is one while it
	// has a created order (due, or to be) or a cancelled one whose unit is
	// not marked returned; one whose orders are all settled is not, until
	// an order of it is written late. The work is a few index probes per
	// voucher with a deadline, never a read of its settled orders
	// (PostgreSQL: once the table has statistics).
	DeadlineVouchers(ctx context.Context) ([]*Voucher, error)
	// LifecycleCounts counts the voucher's orders in the database by what
	// they did with their unit.
	LifecycleCounts(ctx context.Context, voucherID int64) (*LifecycleCounts, error)
}

// RefundRequest is the refund of a payment that came after its order was
// cancelled (a refunding order), as long as the payment is not given back.
type RefundRequest struct {
	OrderID, UserID, VoucherID int64
	// PaymentRef is the provider's reference of the payment to give back.
	PaymentRef string
	// PaidAt is when the payment was recorded: the refund waits since.
	PaidAt time.Time
	// Attempts counts the requests sent, or claimed to be sent.
	Attempts int
	// NextAt is when it is asked for next (for a claimed one, when its
	// claim lapses).
	NextAt time.Time
	// LastError is why the last request failed; "" before one did, or
	// once one was accepted.
	LastError string
	// AcceptedAt is when the provider first accepted to give it back; zero
	// if it has not.
	AcceptedAt time.Time
}

// Order is the refunding order the request gives back the payment of, as
// a Refunder needs it.
func (r *RefundRequest) Order() *Order {
	return &Order{ID: r.OrderID, UserID: r.UserID, VoucherID: r.VoucherID, Status: OrderRefunding,
		PaymentRef: r.PaymentRef, PaidAt: r.PaidAt}
}

// RefundsWaiting are the refunding orders: payments still held.
type RefundsWaiting struct {
	Count int64
	// Oldest is when the longest waiting one's payment was recorded; zero
	// if none waits.
	Oldest time.Time
	// First are the longest waiting, up to the limit asked for.
	First []*RefundRequest
}

// LifecycleCounts are a voucher's orders in the database by status.
type LifecycleCounts struct {
	// Created orders await payment (or never need it: no deadline).
	Created int64
	Paid    int64
	// Cancelled counts every cancelled order: cancelled, refunding and
	// refunded. Their units went back to the database's stock.
	Cancelled int64
	// Unreturned counts the cancelled orders whose unit is not yet marked
	// returned to the cache: the cache may still count it held.
	Unreturned int64
	Refunding  int64
	Refunded   int64
}

// Add counts n orders of the status, whose units are unreturned or not,
// in c: the stores count by (status, unreturned) and add each group.
func (c *LifecycleCounts) Add(status OrderStatus, unreturned bool, n int64) {
	switch status {
	case OrderCreated:
		c.Created += n
	case OrderPaid:
		c.Paid += n
	case OrderRefunding:
		c.Refunding += n
	case OrderRefunded:
		c.Refunded += n
	}
	if status.Cancelled() {
		c.Cancelled += n
		if unreturned {
			c.Unreturned += n
		}
	}
}

// UnitReturner is the ledger's side of a cancellation (Ledger).
type UnitReturner interface {
	// ReturnUnit gives the unit of the buyer's cancelled order orderID back
	// to what the ledger sells, if it still holds that order as the
	// buyer's: the buyer then keeps the order as cancelled (and cannot buy
	// again) unless v.RebuyAfterCancel frees them. Calling it again for the
	// same order finds it moved or freed and does nothing, so a unit goes
	// back once per order id. It reports whether it gave the unit back; a
	// ledger that is the database gives nothing (the cancellation's
	// transaction took the unit back).
	ReturnUnit(ctx context.Context, v *Voucher, userID, orderID int64) (bool, error)
}

// PaymentProvider takes an order's payment.
type PaymentProvider interface {
	// Name names the provider: "fake", "webhook".
	Name() string
	// Charge starts the payment of an order. Paid says it is paid now
	// (the fake provider); else the provider confirms it later
	// (PaymentService.Confirm), and Ref, and URL where the provider gives
	// one, are where the buyer pays.
	Charge(ctx context.Context, o *Order) (Charge, error)
}

// Charge is what PaymentProvider.Charge started.
type Charge struct {
	Paid bool
	// Ref is the provider's reference of the payment.
	Ref string
	// URL is where the buyer pays, if the provider gives one.
	URL string
}

// PaymentEvent is a payment provider's word about an order's payment,
// signed (PaymentService.Confirm).
type PaymentEvent struct {
	// ID is the provider's id of the event: each is acted on once.
	ID string
	// Type is PaymentSucceeded or RefundSucceeded.
	Type    string
	OrderID int64
	// Ref is the provider's reference of the payment.
	Ref string
	// At is when the provider signed it.
	At time.Time
	// Amount and Currency are what the provider says it took, for
	// PaymentSucceeded: nil and "" when the event does not say, which
	// refuses it (Confirm).
	Amount   *int64
	Currency string
}

// RefusedPayment is a payment provider's PaymentSucceeded event that did
// not pay its order: its amount or currency is not the order's, or it
// does not say them. The operator settles it with the provider (a refund
// of what was taken).
type RefusedPayment struct {
	EventID string
	OrderID int64
	Ref     string
	// Expected is what the order owes; Received what the event says was
	// taken (ReceivedAmount nil, ReceivedCurrency "": not said).
	ExpectedAmount   int64
	ExpectedCurrency string
	ReceivedAmount   *int64
	ReceivedCurrency string
	// Reason is RefusedAmount, RefusedCurrency or RefusedUnsaid.
	Reason string
	At     time.Time
}

// PaymentEventState is what the database holds of a payment event's id
// (LifecycleStore.PaymentEventSeen).
type PaymentEventState int

const (
	// PaymentEventNew: neither acted on nor refused.
	PaymentEventNew PaymentEventState = iota
	// PaymentEventRecorded: acted on (LifecycleStore.RecordPaymentEvent).
	PaymentEventRecorded
	// PaymentEventRefused: refused for its amount or currency
	// (LifecycleStore.RefusePaymentEvent), and never acted on.
	PaymentEventRefused
)

// The reasons a payment event is refused (RefusedPayment.Reason).
const (
	RefusedAmount   = "amount_mismatch"
	RefusedCurrency = "currency_mismatch"
	RefusedUnsaid   = "amount_missing"
)

// The types of PaymentEvent.
const (
	PaymentSucceeded = "payment.succeeded"
	RefundSucceeded  = "refund.succeeded"
)
