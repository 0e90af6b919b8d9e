package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// PaymentStore is what PaymentService and Sweeper need of the database.
type PaymentStore interface {
	LifecycleStore
	// Order is OrderStore.Order.
	Order(ctx context.Context, id int64) (*Order, error)
}

// PaymentService is an order's life after admission (docs/design/lifecycle.md, Order
// lifecycle): its buyer pays or cancels it, a payment provider confirms a
// payment, and a cancelled order's unit goes back on sale.
type PaymentService struct {
	Store PaymentStore
	// Ledger takes a cancelled order's unit back; nil: the database took
	// it back with the cancellation, and nothing else holds it.
	Ledger UnitReturner
	// Orders tells a pending order (in the cache, not yet in the database)
	// from an unknown one.
	Orders   *OrderService
	Vouchers *VoucherService
	Provider PaymentProvider
	// Refunds asks for the refund of a payment that came after its order
	// was cancelled, once when it comes, and again until the provider
	// accepts (the requester's loop). Nil: one made on the spot asks once,
	// and whoever runs the loop asks again.
	Refunds *RefundRequester
	Logger  *slog.Logger
	// Grace is how long after its PayBy an order whose payment was started
	// before it (Order.PaymentStartedAt) is held for the provider's
	// confirmation: the buyer may still pay it, and neither Pay nor the
	// sweeper (Sweeper.Grace, the same) cancels it meanwhile. A
	// confirmation after it is refunded. Default DefaultPaymentGrace.
	Grace time.Duration
	// Clock tells the time. Default (nil) time.Now.
	Clock Clock
	// Crash, if set, is called at each crash point of a cancellation
	// (CrashBeforeReturn, CrashBeforeMark): the crash tests' failpoint,
	// which kills the process there. Nil in service.
	Crash func(point string)

	// refused counts the payment events refused for their amount or
	// currency (Confirm), once each.
	refused atomic.Int64
}

// Refused returns how many payment events this service refused for their
// amount or currency since it started (each event once): the metric
// seckill_payment_events_refused_total.
func (s *PaymentService) Refused() int64 { return s.refused.Load() }

// The crash points of a cancellation, between its three writes: the
// database's cancellation, the cache's return of the unit, and the
// database's mark that the cache has it.
const (
	CrashBeforeReturn = "before-return"
	CrashBeforeMark   = "before-mark"
)

// Refunder is a PaymentProvider that gives back a payment that came after
// its order was cancelled (refunding). Done says it is given back now (the
// fake provider); else the provider confirms it later with a
// RefundSucceeded event.
type Refunder interface {
	Refund(ctx context.Context, o *Order) (done bool, err error)
}

// PayResult is what Pay did.
type PayResult struct {
	Order *Order
	// Started says the payment is started and the provider confirms it
	// later (Charge.Paid false): Order is still created, and Charge says
	// where the buyer pays.
	Started bool
	Charge  Charge
}

// payOrder pays the user's order: created → paid with the fake provider, or the
// payment started with the provider, which confirms it later (Confirm),
// and the start recorded (LifecycleStore.StartPayment). A paid order is
// answered as it is: nothing is charged twice. An order past its PayBy is
// cancelled now, as the sweeper would, and refused, unless its payment was
// started before PayBy and the Grace after it is not over: that payment
// is started again (the provider's idempotency key makes it the same one),
// so that its buyer can finish it.
func (s *PaymentService) payOrder(ctx context.Context, userID, orderID int64) (*PayResult, error) {
	o, v, err := s.payable(ctx, userID, orderID)
	if err != nil {
		return nil, err
	}
	switch {
	case o.Status == OrderPaid:
		return &PayResult{Order: o}, nil
	case o.Status.Cancelled():
		return nil, cancelledErr(o)
	}
	now := s.Clock.Now()
	if !o.PayBy.IsZero() && !now.Before(o.PayBy) && !s.held(o, now) {
		c, err := s.cancel(ctx, v, o.ID, ReasonNotPaid, now)
		if err != nil {
			return nil, err
		}
		switch {
		case c.Status == OrderPaid: // paid meanwhile, by the provider
			return &PayResult{Order: c}, nil
		case c.Status.Cancelled():
			return nil, cancelledErr(c)
		}
		// Left created: its payment was started since the read, before
		// PayBy (another request of its buyer), and is held for the
		// grace; started again, as if read so.
		o = c
	}
	if o.Currency == "" || v.Currency == "" {
		// Written with no price by an instance of a version before prices:
		// it owes its voucher's. A voucher made before prices (no currency)
		// has no price to charge, not a price of 0: its orders are charged
		// as they were before prices, the provider asked with no amount
		// (and a payment started then is not taken for free now).
		o.Amount, o.Currency = v.Price, v.Currency
	}
	if o.Amount == 0 && o.Currency != "" {
		// Free: nothing to charge, and no provider to ask. Paid now, with
		// a reference of its own, as the fake provider pays.
		return s.payNow(ctx, o.ID, Payment{Ref: FreeRefPrefix + strconv.FormatInt(o.ID, 10), At: now})
	}
	ch, err := s.Provider.Charge(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("pay order %d: %w", o.ID, err)
	}
	if !ch.Paid {
		// Recorded once the provider answered, at the time checked against
		// PayBy: the sweeper holds the order from now on. Cancelled
		// meanwhile (the deadline passed during the charge, or the buyer
		// in another request), the buyer is told so and not sent to pay.
		st, err := s.Store.StartPayment(ctx, o.ID, now)
		if err != nil {
			return nil, fmt.Errorf("pay order %d: %w", o.ID, err)
		}
		switch {
		case st.Status == OrderPaid:
			return &PayResult{Order: st}, nil
		case st.Status.Cancelled():
			return nil, cancelledErr(st)
		}
		return &PayResult{Order: st, Started: true, Charge: ch}, nil
	}
	return s.payNow(ctx, o.ID, Payment{Ref: ch.Ref, At: now})
}

// FreeRefPrefix starts the payment reference of a free order (Amount 0),
// which Pay pays without the provider: "free_" and the order's id.
const FreeRefPrefix = "free_"

// payNow records a payment made now (the fake provider's, a free
// order's) and answers Pay.
func (s *PaymentService) payNow(ctx context.Context, id int64, pay Payment) (*PayResult, error) {
	p, err := s.record(ctx, id, pay)
	if err != nil {
		return nil, err
	}
	if p.Status != OrderPaid {
		// Cancelled between the read and the payment (the deadline, or the
		// buyer in another request): the payment is recorded to be given
		// back, never lost.
		return nil, cancelledErr(p)
	}
	return &PayResult{Order: p}, nil
}

// Pay pays the user's order (payOrder), and shows it in its currency
// (inCurrency).
func (s *PaymentService) Pay(ctx context.Context, userID, orderID int64) (*PayResult, error) {
	r, err := s.payOrder(ctx, userID, orderID)
	if r != nil {
		s.inCurrency(r.Order)
	}
	return r, err
}

// inCurrency shows an order of a voucher made before prices (it owes 0 in
// no currency of its own) in the default currency.
func (s *PaymentService) inCurrency(o *Order) *Order {
	if o != nil && o.Currency == "" {
		o.Currency = s.Vouchers.CurrencyOrDefault()
	}
	return o
}

// held says the order, past its PayBy at now, is held for its payment's
// confirmation: started before PayBy, and the grace after it not over.
func (s *PaymentService) held(o *Order, now time.Time) bool {
	return !o.PaymentStartedAt.IsZero() && now.Before(o.PayBy.Add(paymentGrace(s.Grace)))
}

// record records a payment of the order, and acts on what it did: see
// paid.
func (s *PaymentService) record(ctx context.Context, id int64, p Payment) (*Order, error) {
	o, err := s.Store.PayOrder(ctx, id, p)
	if err != nil {
		return nil, fmt.Errorf("pay order %d: %w", id, err)
	}
	return s.paid(ctx, o, p), nil
}

// paid acts once on a payment recorded (o is the order as PayOrder left
// it): a second payment of a paid order is said loudly, and the refund of
// one that came after the order's cancellation is asked for. A refund the
// provider refuses is asked for again by Refunds' loop: the database holds
// it due (PayOrder), so that it does not depend on this call, nor on the
// provider sending its event again.
func (s *PaymentService) paid(ctx context.Context, o *Order, p Payment) *Order {
	if o.PaymentRef != "" && o.PaymentRef != p.Ref {
		// The provider took a second payment of one order (the
		// idempotency key should have stopped it): recorded nowhere but
		// here, so said loudly.
		s.Logger.Error("ALERT: a second payment of an order already paid; refund it at the provider", "order", o.ID, "status", o.Status,
			"kept_ref", o.PaymentRef, "second_ref", p.Ref, "provider", s.Provider.Name())
	}
	if o.Status != OrderRefunding || o.PaymentRef != p.Ref {
		return o
	}
	s.Logger.Warn("a payment came after its order was cancelled; it is to be refunded", "order", o.ID, "ref", p.Ref, "provider", s.Provider.Name())
	r := s.refunds()
	if r == nil {
		return o
	}
	refunded, err := r.Request(ctx, o.ID)
	switch {
	case err != nil:
		s.Logger.Error("could not ask for the refund of a late payment; the order stays refunding and it is asked for again", "order", o.ID, "err", err)
	case refunded != nil:
		o = refunded
	}
	return o
}

// refunds returns the requester of refunds, one made on the spot if the
// service has none; nil if the provider gives no refunds.
func (s *PaymentService) refunds() *RefundRequester {
	if s.Refunds != nil {
		return s.Refunds
	}
	r, ok := s.Provider.(Refunder)
	if !ok {
		return nil
	}
	return &RefundRequester{Store: s.Store, Provider: r, Logger: s.Logger, Clock: s.Clock}
}

// cancelOrder cancels the user's unpaid order, and puts its unit back on sale.
// A cancelled order is answered as it is; a paid one is refused.
func (s *PaymentService) cancelOrder(ctx context.Context, userID, orderID int64) (*Order, error) {
	o, v, err := s.payable(ctx, userID, orderID)
	if err != nil {
		return nil, err
	}
	switch {
	case o.Status == OrderPaid:
		return nil, paidErr(o)
	case o.Status.Cancelled():
		if !o.Returned {
			s.returnUnits(ctx, v, []*Order{o})
		}
		return o, nil
	}
	c, err := s.cancel(ctx, v, o.ID, ReasonBuyerCancelled, s.Clock.Now())
	if err != nil {
		return nil, err
	}
	if c.Status == OrderPaid {
		return nil, paidErr(c)
	}
	return c, nil
}

// Cancel cancels the user's unpaid order (cancelOrder), and shows it in
// its currency.
func (s *PaymentService) Cancel(ctx context.Context, userID, orderID int64) (*Order, error) {
	o, err := s.cancelOrder(ctx, userID, orderID)
	return s.inCurrency(o), err
}

// cancel cancels the order in the database, then gives its unit back to
// the cache, and returns the order as it then stands. Cancelled for its
// deadline (ReasonNotPaid), an order whose payment was started before
// PayBy is left created within the grace (CancelUnpaid), as the sweeper
// leaves it: the hold is checked by the cancellation itself, not on an
// earlier read, which a start committed meanwhile makes stale.
func (s *PaymentService) cancel(ctx context.Context, v *Voucher, id int64, reason string, now time.Time) (*Order, error) {
	var (
		o   *Order
		err error
	)
	if reason == ReasonNotPaid {
		o, err = s.Store.CancelUnpaid(ctx, id, now.Add(-v.PayWithin-paymentGrace(s.Grace)), now)
	} else {
		o, err = s.Store.CancelOrder(ctx, id, reason, now)
	}
	if err != nil {
		return nil, fmt.Errorf("cancel order %d: %w", id, err)
	}
	if o.Status.Cancelled() && !o.Returned {
		s.returnUnits(ctx, v, []*Order{o})
	}
	return o, nil
}

// returnUnits gives the units of cancelled orders of v back to the cache,
// then marks them returned. A failure is logged: the unit stays marked
// unreturned, and the sweeper gives it back later (ReturnUnit does nothing
// for an order whose unit is back already).
func (s *PaymentService) returnUnits(ctx context.Context, v *Voucher, os []*Order) {
	if _, err := returnUnits(ctx, s.Store, s.Ledger, v, os, s.Crash); err != nil {
		s.Logger.Warn("could not give cancelled orders' units back; the sweeper will", "voucher", v.ID, "orders", len(os), "err", err)
	}
}

// returnUnits gives the units of cancelled orders of v back to cache (nil:
// none to give, the sync mode), marks them returned in the database, and
// sets their Returned. It returns how many the cache took back now (0 for
// those it had taken already). The order matters: marked after the cache
// took them, so that a crash in between leaves them unreturned and given
// again, which the cache finds done.
func returnUnits(ctx context.Context, store LifecycleStore, ledger UnitReturner, v *Voucher, os []*Order, crash func(string)) (int, error) {
	ctx = context.WithoutCancel(ctx) // half done is only finished later
	if crash != nil && len(os) > 0 {
		crash(CrashBeforeReturn)
	}
	n := 0
	ids := make([]int64, 0, len(os))
	var errs []error
	for _, o := range os {
		if ledger != nil {
			did, err := ledger.ReturnUnit(ctx, v, o.UserID, o.ID)
			if err != nil {
				errs = append(errs, fmt.Errorf("return the unit of order %d: %w", o.ID, err))
				continue
			}
			if did {
				n++
			}
		}
		ids = append(ids, o.ID)
	}
	if len(ids) > 0 {
		if crash != nil {
			crash(CrashBeforeMark)
		}
		if err := store.MarkReturned(ctx, ids); err != nil {
			return n, errors.Join(append(errs, fmt.Errorf("mark %d units returned: %w", len(ids), err))...)
		}
		for _, o := range os {
			o.Returned = o.Returned || slices.Contains(ids, o.ID)
		}
	}
	return n, errors.Join(errs...)
}

// payable returns the user's order and its voucher, for a payment or a
// cancellation: ErrOrderNotFound for another user's, ErrOrderPending for
// one not yet in the database, ErrOrderFailed for a failed one, and
// ErrNoDeadline for one of a voucher without a deadline.
func (s *PaymentService) payable(ctx context.Context, userID, orderID int64) (*Order, *Voucher, error) {
	o, err := s.Orders.Order(ctx, userID, orderID)
	if err != nil {
		return nil, nil, err
	}
	switch o.Status {
	case OrderPending:
		return nil, nil, &Error{Kind: ErrOrderPending, Message: "order " + strconv.FormatInt(o.ID, 10) + " is not confirmed yet; try again shortly", RetryAfter: time.Second}
	case OrderFailed:
		return nil, nil, Errorf(ErrOrderFailed, "order %d failed: %s", o.ID, o.Reason)
	}
	v, err := s.Vouchers.Row(ctx, o.VoucherID)
	if err != nil {
		return nil, nil, err
	}
	if v.PayWithin <= 0 {
		return nil, nil, Errorf(ErrNoDeadline, "voucher %d takes no payment: its orders need none", v.ID)
	}
	return o, v, nil
}

// confirm acts on a payment provider's signed event, once per event id: a
// payment succeeded (created → paid; a cancelled order → refunding, the
// payment recorded to be given back, and its refund asked for), or a
// refund did (refunding → refunded). It returns the order as it then
// stands. An event for an order the database does not hold is
// ErrOrderNotFound: the provider sends it again later, when a pending
// order is written.
//
// The transition comes first, then the event's record, then what the
// transition calls for outside the database (the refund's request): a
// crash before the record leaves the event to act on again when the
// provider sends it again, which the guarded transitions make harmless;
// a replay of an event recorded does nothing more; and a crash after the
// record leaves the refund due in the database, for Refunds' loop. A
// payment event's id is looked up first (seen): one acted on or refused
// already does nothing more, whatever its body says now.
func (s *PaymentService) confirm(ctx context.Context, ev PaymentEvent) (*Order, error) {
	var (
		o   *Order
		err error
		p   = Payment{Ref: ev.Ref, At: s.Clock.Now()}
	)
	switch ev.Type {
	case PaymentSucceeded:
		var stands *Order
		if stands, err = s.seen(ctx, ev); err != nil || stands != nil {
			return stands, err
		}
		if stands, err = s.checkAmount(ctx, ev); err != nil || stands != nil {
			return stands, err
		}
		o, err = s.Store.PayOrder(ctx, ev.OrderID, p)
	case RefundSucceeded:
		o, err = s.Store.RefundOrder(ctx, ev.OrderID, s.Clock.Now())
	default:
		return nil, Errorf(ErrInvalidArgument, "event type %q: want %s or %s", ev.Type, PaymentSucceeded, RefundSucceeded)
	}
	if err != nil {
		return nil, fmt.Errorf("payment event %s: %w", ev.ID, err)
	}
	fresh, err := s.Store.RecordPaymentEvent(ctx, ev.ID, ev.OrderID, s.Clock.Now())
	if err != nil {
		return nil, fmt.Errorf("payment event %s: %w", ev.ID, err)
	}
	if !fresh {
		s.Logger.Info("a payment event seen already; not acted on again", "event", ev.ID, "type", ev.Type, "order", ev.OrderID)
		return o, nil
	}
	if ev.Type == PaymentSucceeded {
		o = s.paid(ctx, o, p)
	}
	return o, nil
}

// Confirm acts on a payment provider's signed event (confirm), and shows
// its order in its currency.
func (s *PaymentService) Confirm(ctx context.Context, ev PaymentEvent) (*Order, error) {
	o, err := s.confirm(ctx, ev)
	return s.inCurrency(o), err
}

// seen answers a payment event whose id was acted on or refused already,
// before its amount is checked: the id, not the body, is what the provider
// sends again, so a replay carrying other data (another amount, none) is
// neither refused anew nor counted, and an id refused stays refused,
// whatever its next delivery says; the order is returned as it stands. It
// returns nil, nil for an id seen neither way.
func (s *PaymentService) seen(ctx context.Context, ev PaymentEvent) (*Order, error) {
	st, err := s.Store.PaymentEventSeen(ctx, ev.ID)
	if err != nil {
		return nil, fmt.Errorf("payment event %s: %w", ev.ID, err)
	}
	if st == PaymentEventNew {
		return nil, nil
	}
	o, err := s.eventOrder(ctx, ev)
	if err != nil {
		return nil, err
	}
	if st == PaymentEventRecorded {
		s.Logger.Info("a payment event seen already; not acted on again", "event", ev.ID, "type", ev.Type, "order", ev.OrderID)
		return o, nil
	}
	received := "nothing said"
	if ev.Amount != nil {
		received = FormatMoney(*ev.Amount, ev.Currency)
	}
	s.Logger.Warn("a payment event refused already came again; it stays refused, whatever it says now",
		"event", ev.ID, "order", o.ID, "ref", ev.Ref, "received", received, "provider", s.Provider.Name())
	return o, nil
}

// eventOrder returns the order a payment event names, owing what it owes:
// ErrOrderNotFound for an order not written.
func (s *PaymentService) eventOrder(ctx context.Context, ev PaymentEvent) (*Order, error) {
	o, err := s.Store.Order(ctx, ev.OrderID)
	if err != nil {
		return nil, fmt.Errorf("payment event %s: %w", ev.ID, err)
	}
	if o.Status == OrderFailed {
		return nil, Errorf(ErrOrderNotFound, "order %d not found", o.ID)
	}
	if o.Currency == "" && s.Vouchers != nil {
		// Written with no price by an instance of a version before
		// prices: it owes its voucher's. One of a voucher made before
		// prices keeps no currency: it has no price (checkAmount).
		v, err := s.Vouchers.Row(ctx, o.VoucherID)
		if err != nil {
			return nil, fmt.Errorf("payment event %s: %w", ev.ID, err)
		}
		o.Amount, o.Currency = v.Price, v.Currency
	}
	return o, nil
}

// checkAmount checks that a payment event took what its order owes, in
// its currency. An event that took another amount or currency, or does not
// say, is refused: the order is not paid by it, the event is recorded
// (RefusePaymentEvent) for the operator to settle with the provider, and
// the order is returned as it stands, to be answered to the provider as
// taken (a retry would say the same). It returns nil, nil for an event
// that may pay its order; ErrOrderNotFound for an order not written.
func (s *PaymentService) checkAmount(ctx context.Context, ev PaymentEvent) (*Order, error) {
	o, err := s.eventOrder(ctx, ev)
	if err != nil {
		return nil, err
	}
	if o.Currency == "" {
		// A voucher made before prices: its payments were never for an
		// amount, and its event is taken as it was then.
		return nil, nil
	}
	currency := o.Currency
	r := &RefusedPayment{EventID: ev.ID, OrderID: o.ID, Ref: ev.Ref, ExpectedAmount: o.Amount, ExpectedCurrency: currency,
		ReceivedAmount: ev.Amount, ReceivedCurrency: ev.Currency, At: s.Clock.Now()}
	switch {
	case ev.Amount == nil || ev.Currency == "":
		r.Reason = RefusedUnsaid
	case ev.Currency != currency:
		r.Reason = RefusedCurrency
	case *ev.Amount != o.Amount:
		r.Reason = RefusedAmount
	default:
		return nil, nil
	}
	fresh, err := s.Store.RefusePaymentEvent(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("payment event %s: %w", ev.ID, err)
	}
	received := "nothing said"
	if ev.Amount != nil {
		received = FormatMoney(*ev.Amount, ev.Currency)
	}
	if fresh {
		s.refused.Add(1)
	}
	s.Logger.Warn("a payment event refused: it did not take what the order owes; the order is not paid by it, settle it with the provider",
		"event", ev.ID, "order", o.ID, "ref", ev.Ref, "reason", r.Reason, "expected", FormatMoney(o.Amount, currency), "received", received,
		"replay", !fresh, "provider", s.Provider.Name())
	return o, nil
}

// RefusedPayments returns up to limit of the payment events refused for
// their amount or currency, the latest first, for the operator.
func (s *PaymentService) RefusedPayments(ctx context.Context, limit int) ([]*RefusedPayment, error) {
	rs, err := s.Store.RefusedPayments(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("refused payment events: %w", err)
	}
	return rs, nil
}

func cancelledErr(o *Order) error {
	msg := "order " + strconv.FormatInt(o.ID, 10) + " was cancelled (" + o.Reason + ")"
	switch o.Status {
	case OrderRefunding:
		msg += "; your payment is being refunded"
	case OrderRefunded:
		msg += "; your payment was refunded"
	}
	return &Error{Kind: ErrOrderCancelled, Message: msg, OrderID: o.ID}
}

func paidErr(o *Order) error {
	return &Error{Kind: ErrOrderPaid, Message: "order " + strconv.FormatInt(o.ID, 10) + " is paid and cannot be cancelled", OrderID: o.ID}
}
