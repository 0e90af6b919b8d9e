package payment_test

import (
	"context"
	"testing"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/payment"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFakePaysAtOnce(t *testing.T) {
	var p seckill.PaymentProvider = payment.Fake{}
	if got := p.Name(); got != "fake" {
		t.Errorf("Name() = %q, want fake", got)
	}
	o := &seckill.Order{ID: 123456789012345678, UserID: 7, VoucherID: 9}
	want := seckill.Charge{Paid: true, Ref: "fake_123456789012345678"}
	for i := range 2 {
		got, err := p.Charge(context.Background(), o)
		if err != nil || got != want {
			t.Errorf("charge %d: Charge() = %+v, %v; want %+v, nil", i+1, got, err, want)
		}
	}
}

// TestFakeRecordsTheAmount: a Fake with Charges records what each charge
// asked it to take.
func TestFakeRecordsTheAmount(t *testing.T) {
	charges := &payment.FakeCharges{}
	p := payment.Fake{Charges: charges}
	for _, o := range []*seckill.Order{{ID: 1, Amount: 1250, Currency: "CNY"}, {ID: 2, Amount: 1200, Currency: "JPY"}} {
		if _, err := p.Charge(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	want := []payment.FakeCharge{{OrderID: 1, Amount: 1250, Currency: "CNY"}, {OrderID: 2, Amount: 1200, Currency: "JPY"}}
	if got := charges.List(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("List() = %+v; want %+v", got, want)
	}
}
