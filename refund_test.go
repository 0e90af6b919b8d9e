package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/apptest"
	"github.com/seckill/seckill/internal/testenv"
)

// countingRefunder is a provider that counts the refunds asked of it, and
// refuses the first refuse of them.
type countingRefunder struct {
	mu     sync.Mutex
	asked  []int64 // order ids, in the order asked
	at     []time.Time
	refuse int
	// done says the refund is given back at once (the fake provider).
	done bool
}

func (*countingRefunder) Name() string { return "counting" }

func (*countingRefunder) Charge(context.Context, *seckill.Order) (seckill.Charge, error) {
	return seckill.Charge{}, errors.New("no charges here")
}

func (r *countingRefunder) Refund(_ context.Context, o *seckill.Order) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, o.ID)
	r.at = append(r.at, time.Now())
	if len(r.asked) <= r.refuse {
		return false, errors.New("refused as told")
	}
	return r.done, nil
}

func (r *countingRefunder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asked)
}

// cancelledOrder saves an order of a voucher with a deadline to store and
// cancels it.
func cancelledOrder(t *testing.T, store seckill.Store) *seckill.Order {
	t.Helper()
	return cancelledOrders(t, store, 1)[0]
}

// cancelledOrders saves n orders of a voucher with a deadline to store
// and cancels them.
func cancelledOrders(t *testing.T, store seckill.Store, n int) []*seckill.Order {
	t.Helper()
	ctx := t.Context()
	v := onSale("refunds", int64(n))
	v.InitialStock, v.PayWithin = int64(n), time.Hour
	v.Price, v.Currency = testPrice, "CNY"
	if err := store.CreateVoucher(ctx, v); err != nil {
		t.Fatal(err)
	}
	os := make([]*seckill.Order, n)
	for i := range os {
		os[i] = &seckill.Order{ID: 7001 + int64(i), UserID: 42 + int64(i), VoucherID: v.ID, CreatedAt: time.Now().UTC()}
	}
	if _, err := store.SaveOrders(ctx, os); err != nil {
		t.Fatal(err)
	}
	for _, o := range os {
		if _, err := store.CancelOrder(ctx, o.ID, seckill.ReasonBuyerCancelled, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return os
}

// TestReplayedLatePaymentAsksRefundOnce: the event of a payment that came
// after its order was cancelled asks for the refund once, however often
// it is sent again.
func TestReplayedLatePaymentAsksRefundOnce(t *testing.T) {
	t.Parallel()
	store := apptest.Store(t)
	o := cancelledOrder(t, store)
	provider := &countingRefunder{}
	s := &seckill.PaymentService{Store: store, Provider: provider, Logger: testenv.Logger(t)}
	ev := seckill.PaymentEvent{ID: "evt_late", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: "pay_late", Amount: took(testPrice), Currency: "CNY"}
	for i := range 3 {
		got, err := s.Confirm(t.Context(), ev)
		if err != nil || got.Status != seckill.OrderRefunding {
			t.Fatalf("Confirm #%d = %+v, %v; want refunding", i+1, got, err)
		}
	}
	if n := provider.count(); n != 1 {
		t.Errorf("the late payment's event, sent 3 times, asked for %d refunds; want 1", n)
	}
}

// TestRefundLostToCrashAskedByLoop: a late payment's event recorded, and
// the process dying before it asked for the refund: the event sent again
// does nothing, and the requester's pass asks for the refund, once.
func TestRefundLostToCrashAskedByLoop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := apptest.Store(t)
	o := cancelledOrder(t, store)
	// What Confirm wrote before the crash: the payment and the event.
	if _, err := store.PayOrder(ctx, o.ID, seckill.Payment{Ref: "pay_late", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RecordPaymentEvent(ctx, "evt_late", o.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	provider := &countingRefunder{}
	r := &seckill.RefundRequester{Store: store, Provider: provider, Logger: testenv.Logger(t)}
	s := &seckill.PaymentService{Store: store, Provider: provider, Refunds: r, Logger: testenv.Logger(t)}
	if _, err := s.Confirm(ctx, seckill.PaymentEvent{ID: "evt_late", Type: seckill.PaymentSucceeded, OrderID: o.ID, Ref: "pay_late", Amount: took(testPrice), Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	if n := provider.count(); n != 0 {
		t.Errorf("a replay asked for %d refunds; want none", n)
	}
	for range 2 {
		if _, err := r.Retry(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := provider.count(); n != 1 {
		t.Errorf("two passes asked for %d refunds; want 1", n)
	}
	if st := r.Stats(); st.Waiting != 1 || st.Accepted != 1 {
		t.Errorf("Stats = %+v; want 1 accepted, still waiting for its refund", st)
	}
}

// TestTwoRequestersAskEachRefundOnce: two instances' requesters passing
// at once over the same due refunds ask the provider for each exactly
// once.
func TestTwoRequestersAskEachRefundOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := apptest.Store(t)
	const n = 40
	for _, o := range cancelledOrders(t, store, n) {
		if _, err := store.PayOrder(ctx, o.ID, seckill.Payment{Ref: fmt.Sprintf("pay_%d", o.ID), At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	provider := &countingRefunder{}
	var wg sync.WaitGroup
	for range 2 {
		r := &seckill.RefundRequester{Store: store, Provider: provider, Logger: testenv.Logger(t), Batch: 3}
		wg.Go(func() {
			if _, err := r.Retry(ctx); err != nil {
				t.Errorf("Retry: %v", err)
			}
		})
	}
	wg.Wait()
	provider.mu.Lock()
	defer provider.mu.Unlock()
	asked := map[int64]int{}
	for _, id := range provider.asked {
		asked[id]++
	}
	if len(asked) != n || len(provider.asked) != n {
		t.Errorf("%d requests for %d of %d refunds; want each asked once", len(provider.asked), len(asked), n)
	}
	if w, err := store.RefundsWaiting(ctx, 0); err != nil || w.Count != n {
		t.Errorf("RefundsWaiting = %+v, %v; want the %d accepted, not refunded yet", w, err, n)
	}
}

// refundOrderFailing is a Store whose RefundOrder fails the first fail
// times, as a database gone, or a crash, between the provider's answer and
// its record.
type refundOrderFailing struct {
	seckill.Store
	mu   sync.Mutex
	fail int
}

func (s *refundOrderFailing) RefundOrder(ctx context.Context, id int64, at time.Time) (*seckill.Order, error) {
	s.mu.Lock()
	fail := s.fail > 0
	s.fail--
	s.mu.Unlock()
	if fail {
		return nil, errors.New("the database went away")
	}
	return s.Store.RefundOrder(ctx, id, at)
}

// TestRefundGivenBackAtOnceRecordedLater: a provider that gives the
// payment back at once, and the record of the order refunded failing:
// the refund is due again once its claim lapses, and the next pass
// records the order refunded.
func TestRefundGivenBackAtOnceRecordedLater(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := apptest.Store(t)
	o := cancelledOrder(t, db)
	paid := time.Now()
	if _, err := db.PayOrder(ctx, o.ID, seckill.Payment{Ref: "pay_late", At: paid}); err != nil {
		t.Fatal(err)
	}
	store := &refundOrderFailing{Store: db, fail: 1}
	provider := &countingRefunder{done: true}
	now := paid.Add(time.Second)
	r := &seckill.RefundRequester{Store: store, Provider: provider, Logger: testenv.Logger(t),
		Lease: time.Minute, Clock: func() time.Time { return now }}
	if _, err := r.Retry(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Order(ctx, o.ID); err != nil || got.Status != seckill.OrderRefunding {
		t.Fatalf("order after a failed record = %+v, %v; want refunding", got, err)
	}
	now = now.Add(time.Minute + time.Second) // the claim lapsed
	if _, err := r.Retry(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Order(ctx, o.ID); err != nil || got.Status != seckill.OrderRefunded {
		t.Errorf("order after the next pass = %+v, %v; want refunded", got, err)
	}
	if n := provider.count(); n != 2 {
		t.Errorf("the provider was asked %d times; want 2 (the same idempotency key)", n)
	}
	if st := r.Stats(); st.Waiting != 0 {
		t.Errorf("Stats = %+v; want none waiting", st)
	}
}

// memRefunds is a LifecycleStore holding one refund request in memory,
// for the requester's timing under synctest; its other methods are not
// called.
type memRefunds struct {
	seckill.LifecycleStore
	mu sync.Mutex
	r  seckill.RefundRequest
}

func (m *memRefunds) ClaimRefunds(_ context.Context, now, until time.Time, _ int) ([]*seckill.RefundRequest, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.r.NextAt.After(now) {
		return nil, nil
	}
	m.r.NextAt = until
	m.r.Attempts++
	r := m.r
	return []*seckill.RefundRequest{&r}, nil
}

func (m *memRefunds) RefundFailed(_ context.Context, _ int64, next time.Time, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.r.NextAt, m.r.LastError = next, reason
	return nil
}

func (m *memRefunds) RefundAccepted(_ context.Context, _ int64, at, next time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.r.AcceptedAt, m.r.NextAt, m.r.LastError = at, next, ""
	return nil
}

func (m *memRefunds) RefundsWaiting(context.Context, int) (*seckill.RefundsWaiting, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &seckill.RefundsWaiting{Count: 1, Oldest: m.r.PaidAt}, nil
}

// TestRefundBackoff: a refused refund is asked for again after the
// backoff, doubled after each refusal up to the maximum, and once
// accepted not before ReAsk (it waits, not refunded).
func TestRefundBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		store := &memRefunds{r: seckill.RefundRequest{OrderID: 1, PaidAt: start, NextAt: start}}
		provider := &countingRefunder{refuse: 4}
		r := &seckill.RefundRequester{Store: store, Provider: provider, Logger: testenv.Logger(t),
			Every: time.Second, MinBackoff: time.Second, MaxBackoff: 4 * time.Second}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		// Refused at 1s, 2s (1s later), 4s (2s) and 8s (4s); accepted at
		// 12s (4s, the maximum).
		want := []int64{1, 2, 4, 8, 12}
		provider.mu.Lock()
		var got []int64
		for _, at := range provider.at {
			got = append(got, int64(at.Sub(start)/time.Second))
		}
		provider.mu.Unlock()
		if len(got) != len(want) {
			t.Fatalf("asked at %v s; want %v s", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("asked at %v s; want %v s", got, want)
			}
		}
		if st := r.Stats(); st.Requests != 5 || st.Failures != 4 || st.Accepted != 1 || st.Waiting != 1 {
			t.Errorf("Stats = %+v; want 5 requests, 4 failures, 1 accepted, 1 waiting", st)
		}
	})
}

// TestAcceptedRefundAskedAgainUntilRefunded: a refund the provider
// accepted, whose refund.succeeded never comes, is asked for again after
// ReAsk, and again, and counted waiting meanwhile; once refunded, no
// more.
func TestAcceptedRefundAskedAgainUntilRefunded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := apptest.Store(t)
	o := cancelledOrder(t, store)
	paid := time.Now().UTC()
	if _, err := store.PayOrder(ctx, o.ID, seckill.Payment{Ref: "pay_late", At: paid}); err != nil {
		t.Fatal(err)
	}
	provider := &countingRefunder{}
	now := paid.Add(time.Second)
	r := &seckill.RefundRequester{Store: store, Provider: provider, Logger: testenv.Logger(t),
		Clock: func() time.Time { return now }}
	pass := func(want int) {
		t.Helper()
		if _, err := r.Retry(ctx); err != nil {
			t.Fatal(err)
		}
		if n := provider.count(); n != want {
			t.Errorf("asked %d times by %v; want %d", n, now.Sub(paid), want)
		}
	}
	pass(1)
	if st := r.Stats(); st.Accepted != 1 || st.Waiting != 1 || !st.Oldest.Equal(paid.Truncate(time.Microsecond)) {
		t.Errorf("Stats once accepted = %+v; want 1 accepted, 1 waiting since %v", st, paid)
	}
	now = now.Add(time.Hour - time.Second)
	pass(1)
	now = now.Add(2 * time.Second) // an hour after the acceptance
	pass(2)
	now = now.Add(time.Hour + time.Second)
	pass(3)
	if _, err := store.RefundOrder(ctx, o.ID, now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Hour)
	pass(3)
	if st := r.Stats(); st.Waiting != 0 {
		t.Errorf("Stats once refunded = %+v; want none waiting", st)
	}
}
