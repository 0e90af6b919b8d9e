package mysql

import (
	"database/sql"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

// orderColumns are an order's columns, of orders o joined to its voucher v
// (fromOrders) for the pay-by deadline; scanOrder reads them.
const (
	orderColumns = `o.id, o.user_id, o.voucher_id, o.status, o.reason, o.created_at, o.written_at,
o.paid_at, o.cancelled_at, o.payment_ref, o.returned_at IS NOT NULL, v.pay_within_seconds, o.payment_started_at`
	fromOrders = ` FROM orders o JOIN vouchers v ON v.id = o.voucher_id`
)

const (
	// selectVoucherOrdersSQL reads a page of a voucher's orders as a
	// range of orders_voucher_id, which InnoDB ends with the primary key:
	// one index entry read per order returned. Without the hint MariaDB
	// 10.11 prefers a lookup of voucher_id alone, and reads every order of
	// the voucher below afterID to skip it (measured: 136,000 index
	// entries for a page of 1,000 at 200,000 orders).
	selectVoucherOrdersSQL = `SELECT ` + orderColumns + ` FROM orders o FORCE INDEX (orders_voucher_id)
JOIN vouchers v ON v.id = o.voucher_id
WHERE o.voucher_id = ? AND o.id > ? ORDER BY o.id LIMIT ?`
)

// scanOrder reads the orderColumns of one row.
func scanOrder(row sqlrows.Scanner) (*seckill.Order, error) {
	var (
		o                              seckill.Order
		writtenAt, paidAt, cancelledAt sql.NullTime
		payWithin                      int64
		startedAt                      sql.NullTime
	)
	if err := row.Scan(&o.ID, &o.UserID, &o.VoucherID, &o.Status, &o.Reason, &o.CreatedAt, &writtenAt,
		&paidAt, &cancelledAt, &o.PaymentRef, &o.Returned, &payWithin, &startedAt); err != nil {
		return nil, err
	}
	o.CreatedAt = o.CreatedAt.UTC()
	if startedAt.Valid {
		o.PaymentStartedAt = startedAt.Time.UTC()
	}
	if paidAt.Valid {
		o.PaidAt = paidAt.Time.UTC()
	}
	if cancelledAt.Valid {
		o.CancelledAt = cancelledAt.Time.UTC()
	}
	if payWithin > 0 && o.Status != seckill.OrderFailed {
		// A row from before written_at counts from its creation.
		from := o.CreatedAt
		if writtenAt.Valid {
			from = writtenAt.Time.UTC()
		}
		o.PayBy = from.Add(time.Duration(payWithin) * time.Second)
	}
	return &o, nil
}
