package orderbatch

import (
	"time"

	"github.com/seckill/seckill"
)

// Sale is what a store's PlaceOrder reads, in one statement, before it
// writes: the voucher's window and stock, and the buyer's created order of
// it if there is one.
type Sale struct {
	VoucherID  int64
	Begin, End time.Time
	Stock      int64
	// Ordered says whether the buyer has a created order of the voucher,
	// OrderID which.
	Ordered bool
	OrderID int64
	// Paused says an operator paused the sale.
	Paused bool
}

// Refusal returns the error with which PlaceOrder refuses an order of the
// sale at now, or nil if the order may go in. The buyer's order comes
// first, as in the Redis admission script: a buyer asking again gets their
// order back even after the sale ended (G5). A stock of zero refuses the
// order without a write; the guarded update, not this read, is what keeps
// a stock from going below zero. now is compared to the microsecond, the
// precision the stores keep the window in.
func Refusal(s Sale, now time.Time) error {
	now = now.Truncate(time.Microsecond)
	switch {
	case s.Ordered:
		return Duplicate(s.OrderID)
	case now.Before(s.Begin):
		return seckill.Errorf(seckill.ErrNotStarted, "the sale of voucher %d has not started", s.VoucherID)
	case !now.Before(s.End):
		return seckill.Errorf(seckill.ErrEnded, "the sale of voucher %d has ended", s.VoucherID)
	case s.Paused:
		return Paused(s.VoucherID)
	case s.Stock <= 0:
		return SoldOut(s.VoucherID)
	}
	return nil
}

// NotTaken returns why PlaceOrder's guarded update took nothing from the
// stock, from the voucher's row read after it (not the buyer's order: the
// insert settled that): its end reached, or moved before now by an
// operator, the sale paused, else sold out.
func NotTaken(s Sale, now time.Time) error {
	switch {
	case !now.Truncate(time.Microsecond).Before(s.End):
		return seckill.Errorf(seckill.ErrEnded, "the sale of voucher %d has ended", s.VoucherID)
	case s.Paused:
		return Paused(s.VoucherID)
	}
	return SoldOut(s.VoucherID)
}

// Paused is PlaceOrder's answer when an operator paused the sale.
func Paused(voucherID int64) error {
	return seckill.Errorf(seckill.ErrPaused, "the sale of voucher %d is paused; try again later", voucherID)
}

// VoucherNotFound is PlaceOrder's answer for a voucher that does not exist.
func VoucherNotFound(voucherID int64) error {
	return seckill.Errorf(seckill.ErrVoucherNotFound, "voucher %d not found", voucherID)
}

// SoldOut is PlaceOrder's answer when the voucher's stock is gone.
func SoldOut(voucherID int64) error {
	return seckill.Errorf(seckill.ErrSoldOut, "voucher %d is sold out", voucherID)
}

// Duplicate is PlaceOrder's answer to a buyer who has order orderID of the
// voucher already: that order, again (G5).
func Duplicate(orderID int64) error {
	return &seckill.Error{Kind: seckill.ErrDuplicateOrder, Message: "you already have an order for this voucher", OrderID: orderID}
}
