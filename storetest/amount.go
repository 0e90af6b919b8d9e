package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
)

// testOrderAmount: an order owes its voucher's price, in its currency, as
// the store writes it, in whichever way it is written (a batch taken for
// new, a batch sorted out because one of its orders is stored already,
// the sync mode's PlaceOrder), and every read gives them back; an order
// of a voucher made before prices owes 0 in no currency of its own, and a
// failed order nothing.
func (s suite) testOrderAmount(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	mk := func(title string, price int64, currency string) *seckill.Voucher {
		v := &seckill.Voucher{Title: title, Stock: 10, InitialStock: 10, BeginTime: base, EndTime: base.Add(time.Hour), Price: price, Currency: currency}
		if err := st.CreateVoucher(ctx, v); err != nil {
			t.Fatalf("CreateVoucher(%q): %v", title, err)
		}
		return v
	}
	yuan, yen, before := mk("yuan", 1250, "CNY"), mk("yen", 1200, "JPY"), mk("made before prices", 0, "")
	owes := map[int64]*seckill.Voucher{}
	batch := []*seckill.Order{order(1, yuan.ID), order(1, yen.ID), order(1, before.ID), order(2, yuan.ID)}
	save(t, st, batch...) // all new
	again := []*seckill.Order{batch[0], order(3, yuan.ID), order(3, yen.ID)}
	save(t, st, again...) // one stored already: sorted out
	placed := order(4, yen.ID)
	if err := placeRetrying(ctx, st, placed, open); err != nil {
		t.Fatalf("PlaceOrder: %v", err)
	}
	for _, o := range append(append(batch, again[1:]...), placed) {
		owes[o.ID] = map[int64]*seckill.Voucher{yuan.ID: yuan, yen.ID: yen, before.ID: before}[o.VoucherID]
	}
	check := func(read string, o *seckill.Order) {
		t.Helper()
		v := owes[o.ID]
		if v == nil {
			t.Errorf("%s: order %d is none of the test's", read, o.ID)
			return
		}
		if o.Amount != v.Price || o.Currency != v.Currency {
			t.Errorf("%s: order %d of voucher %q owes %d %q; want its price %d %q", read, o.ID, v.Title, o.Amount, o.Currency, v.Price, v.Currency)
		}
	}
	for id := range owes {
		o, err := st.Order(ctx, id)
		if err != nil {
			t.Fatalf("Order(%d): %v", id, err)
		}
		check("Order", o)
	}
	for _, user := range []int64{1, 2, 3, 4} {
		os, err := st.UserOrders(ctx, user, 10)
		if err != nil {
			t.Fatalf("UserOrders(%d): %v", user, err)
		}
		for _, o := range os {
			check("UserOrders", o)
		}
	}
	for _, v := range []*seckill.Voucher{yuan, yen, before} {
		os, err := st.VoucherOrders(ctx, v.ID, 0, 10)
		if err != nil {
			t.Fatalf("VoucherOrders(%d): %v", v.ID, err)
		}
		for _, o := range os {
			check("VoucherOrders", o)
		}
	}
	// A paid order keeps what it owed.
	paid, err := st.PayOrder(ctx, batch[0].ID, seckill.Payment{Ref: "pay_1", At: open})
	if err != nil {
		t.Fatalf("PayOrder: %v", err)
	}
	check("PayOrder", paid)

	failed := order(5, yuan.ID)
	failed.Reason = "failed for the test"
	if err := st.FailOrder(ctx, failed); err != nil {
		t.Fatalf("FailOrder: %v", err)
	}
	if o, err := st.Order(ctx, failed.ID); err != nil || o.Amount != 0 || o.Currency != "" {
		t.Errorf("Order(failed) = %+v, %v; want it to owe nothing", o, err)
	}
}

// testRefusedPayments: a refused payment event is recorded once by its
// id, and listed the latest first with every field as refused, an amount
// not said read back as not said.
func (s suite) testRefusedPayments(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	if rs, err := st.RefusedPayments(ctx, 10); err != nil || len(rs) != 0 {
		t.Fatalf("RefusedPayments of an empty store = %v, %v; want none", rs, err)
	}
	thousand := int64(1000)
	first := &seckill.RefusedPayment{EventID: "evt_A1", OrderID: 42, Ref: "pay_1", ExpectedAmount: 1250, ExpectedCurrency: "CNY",
		ReceivedAmount: &thousand, ReceivedCurrency: "CNY", Reason: seckill.RefusedAmount, At: base}
	second := &seckill.RefusedPayment{EventID: "evt_a1", OrderID: 43, Ref: "pay_2", ExpectedAmount: 1200, ExpectedCurrency: "JPY",
		Reason: seckill.RefusedUnsaid, At: base.Add(time.Second + 999*time.Nanosecond)}
	for _, tc := range []struct {
		r    *seckill.RefusedPayment
		want bool
	}{{first, true}, {second, true}, {first, false}} {
		fresh, err := st.RefusePaymentEvent(ctx, tc.r)
		if err != nil || fresh != tc.want {
			t.Errorf("RefusePaymentEvent(%q) = %v, %v; want %v", tc.r.EventID, fresh, err, tc.want)
		}
	}
	got, err := st.RefusedPayments(ctx, 10)
	if err != nil {
		t.Fatalf("RefusedPayments: %v", err)
	}
	w1, w2 := *first, *second
	w1.At, w2.At = micro(first.At), micro(second.At)
	if diff := cmp.Diff([]*seckill.RefusedPayment{&w2, &w1}, got); diff != "" {
		t.Errorf("RefusedPayments (-want +got):\n%s", diff)
	}
	if got, err := st.RefusedPayments(ctx, 1); err != nil || len(got) != 1 || got[0].EventID != second.EventID {
		t.Errorf("RefusedPayments(1) = %v, %v; want the latest alone", got, err)
	}
}

// testPaymentEventSeen: an event id reads as recorded once acted on,
// refused once refused, recorded if in both, and new otherwise; ids
// compare exactly.
func (s suite) testPaymentEventSeen(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	if _, err := st.RecordPaymentEvent(ctx, "evt_paid", 42, base); err != nil {
		t.Fatalf("RecordPaymentEvent: %v", err)
	}
	for _, id := range []string{"evt_refused", "evt_both"} {
		r := &seckill.RefusedPayment{EventID: id, OrderID: 42, ExpectedAmount: 1250, ExpectedCurrency: "CNY", Reason: seckill.RefusedUnsaid, At: base}
		if _, err := st.RefusePaymentEvent(ctx, r); err != nil {
			t.Fatalf("RefusePaymentEvent(%q): %v", id, err)
		}
	}
	if _, err := st.RecordPaymentEvent(ctx, "evt_both", 42, base); err != nil {
		t.Fatalf("RecordPaymentEvent: %v", err)
	}
	for id, want := range map[string]seckill.PaymentEventState{
		"evt_paid":    seckill.PaymentEventRecorded,
		"evt_refused": seckill.PaymentEventRefused,
		"evt_both":    seckill.PaymentEventRecorded,
		"evt_new":     seckill.PaymentEventNew,
		"EVT_PAID":    seckill.PaymentEventNew,
		"evt_Refused": seckill.PaymentEventNew,
	} {
		if got, err := st.PaymentEventSeen(ctx, id); err != nil || got != want {
			t.Errorf("PaymentEventSeen(%q) = %v, %v; want %v", id, got, err, want)
		}
	}
}
