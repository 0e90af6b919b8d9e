// Package orderbatch holds the rules every store's SaveOrders applies to a
// batch of orders: which to insert given the orders already stored, and
// how much each voucher's stock drops; the one FailOrder applies to a
// failed order's reason; and the refusals of PlaceOrder, so that the three
// stores answer a buyer alike.
package orderbatch

import (
	"cmp"
	"slices"

	"github.com/seckill/seckill"
)

// Key identifies a stored order by its id, buyer and voucher.
type Key struct {
	ID, UserID, VoucherID int64
	// Holds says the order holds its buyer's (user, voucher) pair: every
	// order but one cancelled on a voucher that lets its buyer buy again
	// (its slot is NULL).
	Holds bool
}

// buyer is who bought what: at most one order each (G2).
type buyer struct{ userID, voucherID int64 }

// Classify gives each order its outcome against the stored orders and the
// orders before it in the batch, and returns the orders to insert: those
// whose id and (buyer, voucher) pair are both new.
func Classify(orders []*seckill.Order, stored []Key) ([]seckill.SaveOutcome, []*seckill.Order) {
	byID := make(map[int64]buyer, len(stored)+len(orders))
	byBuyer := make(map[buyer]bool, len(stored)+len(orders))
	for _, k := range stored {
		b := buyer{k.UserID, k.VoucherID}
		byID[k.ID] = b
		// A redelivery of an order cancelled on a rebuy voucher is
		// AlreadySaved, and leaves its buyer's next order free to go in.
		byBuyer[b] = byBuyer[b] || k.Holds
	}
	outcomes := make([]seckill.SaveOutcome, len(orders))
	var inserts []*seckill.Order
	for i, o := range orders {
		b := buyer{o.UserID, o.VoucherID}
		if had, ok := byID[o.ID]; ok {
			if had == b {
				outcomes[i] = seckill.AlreadySaved
			} else {
				outcomes[i] = seckill.IDConflict
			}
			continue
		}
		if byBuyer[b] {
			outcomes[i] = seckill.BuyerConflict
			continue
		}
		outcomes[i] = seckill.Saved
		byID[o.ID] = b
		byBuyer[b] = true
		inserts = append(inserts, o)
	}
	return outcomes, inserts
}

// Take is how much of a voucher's stock a batch takes.
type Take struct{ VoucherID, N int64 }

// Takes sums the orders per voucher, in voucher id order, so that
// concurrent batches lock vouchers in one order.
func Takes(inserts []*seckill.Order) []Take {
	var ts []Take
	for _, o := range inserts {
		i, found := slices.BinarySearchFunc(ts, o.VoucherID, func(t Take, id int64) int { return cmp.Compare(t.VoucherID, id) })
		if !found {
			ts = slices.Insert(ts, i, Take{VoucherID: o.VoucherID})
		}
		ts[i].N++
	}
	return ts
}

// Living is a store's Order read back after a step of the order's life
// (o, err): a failed order has no life after admission, and is not found.
func Living(o *seckill.Order, err error) (*seckill.Order, error) {
	switch {
	case err != nil:
		return nil, err
	case o.Status == seckill.OrderFailed:
		return nil, seckill.Errorf(seckill.ErrOrderNotFound, "order %d not found: it failed", o.ID)
	}
	return o, nil
}
