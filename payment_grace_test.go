package seckill_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// laterProvider starts payments that the provider confirms later, as the
// webhook provider does: pay answers 202.
type laterProvider struct{}

func (laterProvider) Name() string { return "later" }

func (laterProvider) Charge(_ context.Context, o *seckill.Order) (seckill.Charge, error) {
	return seckill.Charge{Ref: "pay_" + strconv.FormatInt(o.ID, 10)}, nil
}

// TestPaymentStartedBeforePayByHeldForGrace: with a provider that confirms
// later, a buyer who started paying before payBy keeps the order through
// the grace after it: the sweeper does not cancel it, pay asked again then
// starts the same payment, and the confirmation pays it; its unit was
// never back on sale. An order never started is cancelled at its payBy as
// before; one whose grace is over is cancelled, by the sweeper or by pay,
// and its late confirmation is to be refunded.
func TestPaymentStartedBeforePayByHeldForGrace(t *testing.T) {
	t.Parallel()
	const grace = 10 * time.Minute
	l := soldLifecycle(t, 4, false)
	ctx := context.Background()
	var now time.Time
	clock := func() time.Time { return now }
	l.payments.Provider, l.payments.Grace, l.payments.Clock = laterProvider{}, grace, clock
	sweeper := l.sweeper(clock)
	sweeper.Grace = grace
	inGrace, unstarted, sweptAfterGrace, paidAfterGrace := l.orders[50_000], l.orders[50_001], l.orders[50_002], l.orders[50_003]
	payBy := func(o *seckill.Order) time.Time { return o.CreatedAt.Add(l.v.PayWithin) }

	pay := func(o *seckill.Order) (*seckill.PayResult, error) {
		t.Helper()
		return l.payments.Pay(ctx, o.UserID, o.ID)
	}
	for _, o := range []*seckill.Order{inGrace, sweptAfterGrace, paidAfterGrace} {
		now = payBy(o).Add(-time.Second)
		res, err := pay(o)
		if err != nil || !res.Started || res.Order.Status != seckill.OrderCreated || res.Order.PaymentStartedAt.IsZero() {
			t.Fatalf("Pay of order %d before its payBy = %+v, %v; want started, created, its start recorded", o.ID, res, err)
		}
	}

	// Every payBy passed; the grace of none.
	now = payBy(paidAfterGrace).Add(time.Second)
	if c, _, err := sweeper.Sweep(ctx); err != nil || c != 1 {
		t.Errorf("Sweep past every payBy, within the grace = %d cancelled, %v; want 1, the order never started", c, err)
	}
	l.checkStatus(t, unstarted, seckill.OrderCancelled)
	for _, o := range []*seckill.Order{inGrace, sweptAfterGrace, paidAfterGrace} {
		l.checkStatus(t, o, seckill.OrderCreated)
	}
	res, err := pay(inGrace)
	if err != nil || !res.Started || res.Charge.Ref != "pay_"+strconv.FormatInt(inGrace.ID, 10) {
		t.Fatalf("Pay again after payBy, within the grace = %+v, %v; want the same payment started", res, err)
	}
	got, err := l.payments.Confirm(ctx, seckill.PaymentEvent{ID: "evt_in_grace", Type: seckill.PaymentSucceeded, OrderID: inGrace.ID, Ref: res.Charge.Ref, Amount: took(testPrice), Currency: "CNY"})
	if err != nil || got.Status != seckill.OrderPaid {
		t.Errorf("Confirm within the grace = %+v, %v; want paid", got, err)
	}

	// The grace of the last two is over.
	now = payBy(paidAfterGrace).Add(grace + time.Second)
	if _, err := pay(paidAfterGrace); !errors.Is(err, seckill.ErrOrderCancelled) {
		t.Errorf("Pay after the grace = %v; want %v", err, seckill.ErrOrderCancelled)
	}
	if c, _, err := sweeper.Sweep(ctx); err != nil || c != 1 {
		t.Errorf("Sweep after the grace = %d cancelled, %v; want 1", c, err)
	}
	got, err = l.payments.Confirm(ctx, seckill.PaymentEvent{ID: "evt_late", Type: seckill.PaymentSucceeded, OrderID: sweptAfterGrace.ID, Ref: "pay_late", Amount: took(testPrice), Currency: "CNY"})
	if err != nil || got.Status != seckill.OrderRefunding {
		t.Errorf("Confirm after the grace = %+v, %v; want refunding", got, err)
	}
	l.checkStatus(t, inGrace, seckill.OrderPaid)
	l.checkStatus(t, paidAfterGrace, seckill.OrderCancelled)

	// Three units back on sale, none of them the order paid in its grace.
	st, err := l.cache.State(ctx, l.v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != 3 {
		t.Errorf("Redis holds %d units; want 3, the cancelled orders'", st.Remaining)
	}
}

// checkStatus fails t unless the order's status in the database is want.
func (l *lifecycle) checkStatus(t *testing.T, o *seckill.Order, want seckill.OrderStatus) {
	t.Helper()
	got, err := l.store.Order(context.Background(), o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != want {
		t.Errorf("order %d is %s; want %s", o.ID, got.Status, want)
	}
}

// cancellingProvider starts payments to be confirmed later, but cancels
// the order first, as a sweep running while the provider answers would.
type cancellingProvider struct{ store seckill.Store }

func (cancellingProvider) Name() string { return "cancelling" }

func (p cancellingProvider) Charge(ctx context.Context, o *seckill.Order) (seckill.Charge, error) {
	if _, err := p.store.CancelOrder(ctx, o.ID, seckill.ReasonNotPaid, time.Now()); err != nil {
		return seckill.Charge{}, err
	}
	return seckill.Charge{Ref: "pay_" + strconv.FormatInt(o.ID, 10)}, nil
}

// TestPayCancelledDuringChargeNotStarted: an order cancelled while the
// provider started its payment is answered cancelled, its buyer not sent
// to pay, and no start is recorded.
func TestPayCancelledDuringChargeNotStarted(t *testing.T) {
	t.Parallel()
	l := soldLifecycle(t, 1, false)
	ctx := context.Background()
	o := l.orders[50_000]
	l.payments.Provider = cancellingProvider{l.store}
	res, err := l.payments.Pay(ctx, o.UserID, o.ID)
	if !errors.Is(err, seckill.ErrOrderCancelled) {
		t.Fatalf("Pay of an order cancelled during the charge = %+v, %v; want %v", res, err, seckill.ErrOrderCancelled)
	}
	got, err := l.store.Order(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != seckill.OrderCancelled || !got.PaymentStartedAt.IsZero() {
		t.Errorf("the order is %s, payment started at %v; want cancelled, never started", got.Status, got.PaymentStartedAt)
	}
}

// TestBuyerCancelNotHeldByStartedPayment: the grace holds an order against
// the deadline, not against its buyer: a buyer who started paying and then
// cancels, past payBy within the grace, has it cancelled, its unit back on
// sale, and a confirmation after that is to be refunded.
func TestBuyerCancelNotHeldByStartedPayment(t *testing.T) {
	t.Parallel()
	l := soldLifecycle(t, 1, false)
	ctx := context.Background()
	o := l.orders[50_000]
	var now time.Time
	l.payments.Provider, l.payments.Clock = laterProvider{}, func() time.Time { return now }
	now = o.CreatedAt.Add(l.v.PayWithin - time.Second)
	if res, err := l.payments.Pay(ctx, o.UserID, o.ID); err != nil || !res.Started {
		t.Fatalf("Pay = %+v, %v; want started", res, err)
	}
	now = o.CreatedAt.Add(l.v.PayWithin + time.Second)
	c, err := l.payments.Cancel(ctx, o.UserID, o.ID)
	if err != nil || c.Status != seckill.OrderCancelled || c.Reason != seckill.ReasonBuyerCancelled {
		t.Fatalf("Cancel within the grace = %+v, %v; want cancelled by the buyer", c, err)
	}
	got, err := l.payments.Confirm(ctx, seckill.PaymentEvent{ID: "evt_after_cancel", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: "pay_x", Amount: took(testPrice), Currency: "CNY"})
	if err != nil || got.Status != seckill.OrderRefunding {
		t.Errorf("Confirm after the buyer's cancel = %+v, %v; want refunding", got, err)
	}
	st, err := l.cache.State(ctx, l.v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != 1 {
		t.Errorf("Redis holds %d units; want 1, the cancelled order's", st.Remaining)
	}
}

// blockingProvider starts payments to be confirmed later, each charge
// saying it began (charging) and then waiting for release.
type blockingProvider struct {
	charging chan<- struct{}
	release  <-chan struct{}
}

func (blockingProvider) Name() string { return "blocking" }

func (p blockingProvider) Charge(ctx context.Context, o *seckill.Order) (seckill.Charge, error) {
	p.charging <- struct{}{}
	select {
	case <-p.release:
	case <-ctx.Done():
		return seckill.Charge{}, ctx.Err()
	}
	return seckill.Charge{Ref: "pay_" + strconv.FormatInt(o.ID, 10)}, nil
}

// readHookStore runs afterRead, once armed, when a read of an order
// returns: between a Pay's read and what it does with it.
type readHookStore struct {
	seckill.Store
	afterRead atomic.Pointer[func()]
}

func (s *readHookStore) Order(ctx context.Context, id int64) (*seckill.Order, error) {
	o, err := s.Store.Order(ctx, id)
	if f := s.afterRead.Swap(nil); f != nil {
		(*f)()
	}
	return o, err
}

// TestLatePayDoesNotCancelPaymentStartedMeanwhile: one buyer, two
// requests. Pay Y, a second before payBy, is in the provider's charge;
// Pay X, a second after payBy, reads the order not started; Y's start is
// then recorded and Y answered 202; X's deadline cancel must see the
// start and leave the order held for the grace, and X start the same
// payment again, not cancel the order and put its unit back on sale.
func TestLatePayDoesNotCancelPaymentStartedMeanwhile(t *testing.T) {
	t.Parallel()
	const grace = 10 * time.Minute
	l := soldLifecycle(t, 1, false)
	ctx := context.Background()
	o := l.orders[50_000]
	payBy := o.CreatedAt.Add(l.v.PayWithin)
	var (
		mu  sync.Mutex
		now = payBy.Add(-time.Second)
	)
	l.payments.Clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l.payments.Grace = grace
	charging, release := make(chan struct{}, 2), make(chan struct{})
	l.payments.Provider = blockingProvider{charging: charging, release: release}
	reads := &readHookStore{Store: l.store}
	l.payments.Orders.Store = reads

	type answer struct {
		res *seckill.PayResult
		err error
	}
	yDone := make(chan answer, 1)
	go func() {
		res, err := l.payments.Pay(ctx, o.UserID, o.ID)
		yDone <- answer{res, err}
	}()
	<-charging // Y read the order before payBy and is charging
	mu.Lock()
	now = payBy.Add(time.Second)
	mu.Unlock()
	var y answer
	release2 := func() {
		// X read the order, not started: Y's charge returns and its start
		// commits before X acts on that read.
		close(release)
		y = <-yDone
	}
	reads.afterRead.Store(&release2)
	x, err := l.payments.Pay(ctx, o.UserID, o.ID)
	if y.err != nil || y.res == nil || !y.res.Started {
		t.Fatalf("Pay Y before payBy = %+v, %v; want started", y.res, y.err)
	}
	if err != nil || !x.Started || x.Charge.Ref != y.res.Charge.Ref || x.Order.Status != seckill.OrderCreated {
		t.Fatalf("Pay X after payBy, its read stale, Y's start committed = %+v, %v; want the same payment started, created", x, err)
	}
	got, err := l.store.Order(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != seckill.OrderCreated || !got.PaymentStartedAt.Equal(payBy.Add(-time.Second)) {
		t.Errorf("the order is %s, payment started at %v; want created, started at %v", got.Status, got.PaymentStartedAt, payBy.Add(-time.Second))
	}
	if st, err := l.cache.State(ctx, l.v.ID); err != nil {
		t.Fatal(err)
	} else if st.Remaining != 0 {
		t.Errorf("Redis holds %d units; want 0: the unit held for the started payment is not back on sale", st.Remaining)
	}
	paid, err := l.payments.Confirm(ctx, seckill.PaymentEvent{ID: "evt_y", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: y.res.Charge.Ref, Amount: took(testPrice), Currency: "CNY"})
	if err != nil || paid.Status != seckill.OrderPaid {
		t.Errorf("Confirm of Y's payment within the grace = %+v, %v; want paid", paid, err)
	}
}
