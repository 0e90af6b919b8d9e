package storetest

import (
	"context"
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

	// Accepted: not due until the time given, its first acceptance's
	// time kept, still waiting (the payment is held until refunded); b
	// waits too.
	acceptedA := againA
	acceptedA.NextAt, acceptedA.LastError, acceptedA.AcceptedAt = micro(base.Add(65*time.Minute)), "", micro(base.Add(5*time.Minute))
	if err := st.RefundAccepted(ctx, a.ID, base.Add(5*time.Minute), base.Add(65*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, err := st.ClaimRefund(ctx, a.ID, base.Add(time.Hour), base.Add(2*time.Hour)); err != nil || got != nil {
		t.Errorf("ClaimRefund of an accepted request before it is asked again = %+v, %v; want nil", got, err)
	}
	checkWaiting(t, st, 10, &seckill.RefundsWaiting{Count: 2, Oldest: ra.PaidAt, First: []*seckill.RefundRequest{&acceptedA, &rbClaimed}})
	// Not refunded by then: asked again, and accepted again.
	reaskedA := acceptedA
	reaskedA.Attempts, reaskedA.NextAt = 3, micro(base.Add(70*time.Minute))
	if got, err := st.ClaimRefund(ctx, a.ID, base.Add(65*time.Minute), base.Add(70*time.Minute)); err != nil || cmp.Diff(&reaskedA, got) != "" {
		t.Errorf("ClaimRefund of an accepted request not refunded = %+v, %v; want %+v", got, err, &reaskedA)
	}
	if err := st.RefundAccepted(ctx, a.ID, base.Add(66*time.Minute), base.Add(126*time.Minute)); err != nil {
		t.Fatal(err)
	}
	reaskedA.NextAt = micro(base.Add(126 * time.Minute))
	checkWaiting(t, st, 1, &seckill.RefundsWaiting{Count: 2, Oldest: ra.PaidAt, First: []*seckill.RefundRequest{&reaskedA}})
	// Refunded: neither claimed nor waiting, whatever is recorded after.
	for _, id := range []int64{a.ID, b.ID} {
		if _, err := st.RefundOrder(ctx, id, base.Add(8*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.RefundFailed(ctx, a.ID, base.Add(time.Hour), "late answer"); err != nil {
		t.Fatal(err)
	}
	if err := st.RefundAccepted(ctx, b.ID, base.Add(time.Hour), base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	claim("all refunded", base.Add(10*time.Hour), base.Add(11*time.Hour))
	checkWaiting(t, st, 10, &seckill.RefundsWaiting{})
}

// RefundNextAtClearer is a store that can clear an order's refund_next_at,
// as a binary from before the refund retry leaves a refunding order (in a
// rolling upgrade): each backend's tests implement it for the suite.
type RefundNextAtClearer interface {
	ClearRefundNextAt(ctx context.Context, id int64) error
}

// testRefundLeftByOldBinary: a refunding order whose refund_next_at is
// not set (made refunding, or its refund accepted, by a binary from before
// the refund retry) is due at once, and waiting.
func (s suite) testRefundLeftByOldBinary(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	old, ok := st.(RefundNextAtClearer)
	if !ok {
		t.Fatalf("%T does not implement storetest.RefundNextAtClearer", st)
	}
	v := deadlineVoucher(t, st, 10, false)
	a, b := order(1, v.ID), order(2, v.ID)
	save(t, st, a, b)
	ra := lateRefund(t, st, a, "late_a", time.Minute)
	rb := lateRefund(t, st, b, "late_b", 2*time.Minute)
	if err := old.ClearRefundNextAt(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	rb.NextAt = time.Time{}
	checkWaiting(t, st, 10, &seckill.RefundsWaiting{Count: 2, Oldest: ra.PaidAt, First: []*seckill.RefundRequest{ra, rb}})
	until := micro(base.Add(time.Hour))
	claimedB := *rb
	claimedB.Attempts, claimedB.NextAt = 1, until
	// Before a's payment: b alone is due, its time not set.
	got, err := st.ClaimRefunds(ctx, base, until, 10)
	if err != nil || cmp.Diff([]*seckill.RefundRequest{&claimedB}, got) != "" {
		t.Errorf("ClaimRefunds with b's next attempt not set = %+v, %v; want b", got, err)
	}
	if err := old.ClearRefundNextAt(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	claimedA := *ra
	claimedA.Attempts, claimedA.NextAt = 1, until
	if got, err := st.ClaimRefund(ctx, a.ID, base, until); err != nil || cmp.Diff(&claimedA, got) != "" {
		t.Errorf("ClaimRefund with a's next attempt not set = %+v, %v; want %+v", got, err, &claimedA)
	}
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
