package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	seckill "github.com/seckill/seckill"
)

// lateRefund cancels o and pays it after, at base+after: refunding, its
// refund request due from then. It returns the request as it then stands.
func lateRefund(tb testing.TB, st seckill.Store, o *seckill.Order, ref string, after time.Duration) *seckill.RefundRequest {
	tb.Helper()
	ctx := tb.Context()
	if _, err := st.CancelOrder(ctx, o.ID, seckill.ReasonBuyerCancelled, base.Add(after-time.Second)); err != nil {
		tb.Fatalf("CancelOrder(%d): %v", o.ID, err)
	}
	p := payment(ref, after)
	got, err := st.PayOrder(ctx, o.ID, p)
	if err != nil || got.Status != seckill.OrderRefunding {
		tb.Fatalf("PayOrder(%d) of a cancelled order = %+v, %v; want refunding", o.ID, got, err)
	}
	return &seckill.RefundRequest{OrderID: o.ID, UserID: o.UserID, VoucherID: o.VoucherID, PaymentRef: ref,
		PaidAt: micro(p.At), NextAt: micro(p.At)}
}

// checkWaiting fails tb unless RefundsWaiting(limit) is want.
func checkWaiting(tb testing.TB, st seckill.Store, limit int, want *seckill.RefundsWaiting) {
	tb.Helper()
	got, err := st.RefundsWaiting(tb.Context(), limit)
	if err != nil {
		tb.Errorf("RefundsWaiting: %v", err)
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		tb.Errorf("RefundsWaiting(%d) (-want +got):\n%s", limit, diff)
	}
}

// testRefundRequests: a late payment's refund request is due from its
// payment; a claim takes it until its lease ends, attempts counted, and no
// other claim takes it meanwhile; refused, it is due again at the time
// given, its reason kept; accepted, it is claimed and waits no more. A
// paid order's payment is never a refund request.
func (s suite) testRefundRequests(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	v := deadlineVoucher(t, st, 10, false)
	a, b, c := order(1, v.ID), order(2, v.ID), order(3, v.ID)
	save(t, st, a, b, c)
	mustPay(t, st, c.ID)
	checkWaiting(t, st, 10, &seckill.RefundsWaiting{})

	ra := lateRefund(t, st, a, "late_a", time.Minute)
	rb := lateRefund(t, st, b, "late_b", 2*time.Minute)
	checkWaiting(t, st, 10, &seckill.RefundsWaiting{Count: 2, Oldest: ra.PaidAt, First: []*seckill.RefundRequest{ra, rb}})
	checkWaiting(t, st, 1, &seckill.RefundsWaiting{Count: 2, Oldest: ra.PaidAt, First: []*seckill.RefundRequest{ra}})
	checkWaiting(t, st, 0, &seckill.RefundsWaiting{Count: 2, Oldest: ra.PaidAt})

	claim := func(what string, now, until time.Time, want ...*seckill.RefundRequest) {
		t.Helper()
		got, err := st.ClaimRefunds(ctx, now, until, 10)
		if err != nil {
			t.Fatalf("%s: ClaimRefunds: %v", what, err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: ClaimRefunds (-want +got):\n%s", what, diff)
		}
	}
	claim("before either is due", base.Add(time.Minute-time.Millisecond), base.Add(time.Hour))
	lease := micro(base.Add(time.Minute + 30*time.Second))
	claimedA := *ra
	claimedA.Attempts, claimedA.NextAt = 1, lease
	claim("a due", base.Add(time.Minute), lease, &claimedA)
	claim("a claimed, b not due", base.Add(time.Minute+time.Second), base.Add(time.Hour))
	if got, err := st.ClaimRefund(ctx, a.ID, base.Add(time.Minute+time.Second), base.Add(time.Hour)); err != nil || got != nil {
		t.Errorf("ClaimRefund of a claimed request = %+v, %v; want nil", got, err)
	}

	// Refused: due again when told, its reason kept.
	if err := st.RefundFailed(ctx, a.ID, base.Add(5*time.Minute), "refused: 503"); err != nil {
		t.Fatal(err)
	}
	failedA := claimedA
	failedA.NextAt, failedA.LastError = micro(base.Add(5*time.Minute)), "refused: 503"
	rbClaimed := *rb
	rbClaimed.Attempts, rbClaimed.NextAt = 1, micro(base.Add(6*time.Minute))
	claim("b due, a refused until later", base.Add(4*time.Minute), base.Add(6*time.Minute), &rbClaimed)
	checkWaiting(t, st, 10, &seckill.RefundsWaiting{Count: 2, Oldest: ra.PaidAt, First: []*seckill.RefundRequest{&failedA, &rbClaimed}})
	againA := failedA
	againA.Attempts, againA.NextAt = 2, micro(base.Add(7*time.Minute))
	if got, err := st.ClaimRefund(ctx, a.ID, base.Add(5*time.Minute), base.Add(7*time.Minute)); err != nil || cmp.Diff(&againA, got) != "" {
		t.Errorf("ClaimRefund of a refused request due again = %+v, %v; want %+v", got, err, &againA)
	}

	// Accepted: never claimed again, waiting no more, a failure after it
	// changing nothing; b waits alone.
	if err := st.RefundAccepted(ctx, a.ID, base.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := st.RefundFailed(ctx, a.ID, base.Add(5*time.Minute), "late answer"); err != nil {
		t.Fatal(err)
	}
	if got, err := st.ClaimRefund(ctx, a.ID, base.Add(time.Hour), base.Add(2*time.Hour)); err != nil || got != nil {
		t.Errorf("ClaimRefund of an accepted request = %+v, %v; want nil", got, err)
	}
	checkWaiting(t, st, 10, &seckill.RefundsWaiting{Count: 1, Oldest: rb.PaidAt, First: []*seckill.RefundRequest{&rbClaimed}})
	// Refunded: no longer waiting either.
	if _, err := st.RefundOrder(ctx, b.ID, base.Add(8*time.Minute)); err != nil {
		t.Fatal(err)
	}
	claim("all accepted or refunded", base.Add(time.Hour), base.Add(2*time.Hour))
	checkWaiting(t, st, 10, &seckill.RefundsWaiting{})
}

// testClaimRefundsConcurrent: claims racing for many due refund requests
// take each exactly once.
func (s suite) testClaimRefundsConcurrent(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	const n, claimers = 30, 4
	v := deadlineVoucher(t, st, n, false)
	os := orders(n, 1, v.ID)
	save(t, st, os...)
	for i, o := range os {
		lateRefund(t, st, o, fmt.Sprintf("late_%d", i), time.Minute)
	}
	var (
		mu      sync.Mutex
		claimed = map[int64]int{}
		wg      sync.WaitGroup
	)
	for range claimers {
		wg.Go(func() {
			for {
				rs, err := st.ClaimRefunds(ctx, base.Add(time.Hour), base.Add(2*time.Hour), 3)
				if err != nil {
					t.Errorf("ClaimRefunds: %v", err)
					return
				}
				if len(rs) == 0 {
					return
				}
				mu.Lock()
				for _, r := range rs {
					claimed[r.OrderID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(claimed) != n {
		t.Errorf("%d of %d due requests claimed", len(claimed), n)
	}
	for id, k := range claimed {
		if k != 1 {
			t.Errorf("order %d's refund request claimed %d times", id, k)
		}
	}
}
