package seckill

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxIdempotencyKey bounds the Idempotency-Key of an addition of stock.
const MaxIdempotencyKey = 100

// The operator's controls of a voucher on sale (docs/design/controls.md):
// pause and resume, end now, add stock. Each answers only once what
// admission reads holds it: the database (the truth, which a rebuild
// reads), and the ledger's copy (Ledger.Control).

// Control is an operator's control of a voucher, as the ledger applies it
// (Ledger.Control).
type Control int

// The controls.
const (
	// ControlPause pauses or resumes the sale, as the voucher's Paused
	// says.
	ControlPause Control = iota + 1
	// ControlEnd ends the sale now.
	ControlEnd
	// ControlAddStock adds stock: the ledger takes the voucher's stock
	// from the database again.
	ControlAddStock
)

// Pause pauses the voucher's sale (paused true) or resumes it, and returns
// it as it is now. Once Pause has returned, no buy is admitted to a paused
// voucher, on any instance, until it is resumed: the database holds the
// pause (the sync mode's PlaceOrder checks it under the voucher's row
// lock), and so does the ledger (Ledger.Control). A pause the database
// took and the ledger did not is ErrUnavailable: the caller asks again.
func (s *VoucherService) Pause(ctx context.Context, id int64, paused bool) (*VoucherView, error) {
	return s.control(ctx, id, ControlPause, func(ctx context.Context) (*Voucher, error) {
		v, err := s.Store.PauseVoucher(ctx, id, paused)
		if err != nil {
			return nil, fmt.Errorf("pause voucher %d: %w", id, err)
		}
		return v, nil
	})
}

// End ends the voucher's sale now: its EndTime becomes now (unless it
// ended before) in the database, and the ledger marks it ended, so that no
// buy is admitted once End has returned, whatever another clock says. It
// returns the voucher as it is now.
func (s *VoucherService) End(ctx context.Context, id int64) (*VoucherView, error) {
	return s.control(ctx, id, ControlEnd, func(ctx context.Context) (*Voucher, error) {
		v, err := s.Store.EndVoucher(ctx, id, s.Clock.Now())
		if err != nil {
			return nil, fmt.Errorf("end voucher %d: %w", id, err)
		}
		return v, nil
	})
}

// control runs the control c of voucher id through the ledger, write
// being its database write, and answers the voucher as it then is.
func (s *VoucherService) control(ctx context.Context, id int64, c Control, write func(context.Context) (*Voucher, error)) (*VoucherView, error) {
	return s.Ledger.Control(ctx, id, c, func(ctx context.Context) (*Voucher, error) {
		v, err := write(ctx)
		if err != nil {
			return nil, err
		}
		s.rows.remember(v)
		s.forgetLists()
		return v, nil
	})
}

// AddStock adds units to the voucher's stock, exactly once per key: the
// database records the key with the units in the transaction that adds
// them, so a retry, a concurrent duplicate or the same request on another
// instance adds nothing more. The ledger then takes the stock from the
// database (Ledger.Control), also for a key recorded already, so that a
// retry after a failure half-way puts it right. The answer's Remaining
// includes the units. The same key with other units is
// ErrInvalidArgument.
func (s *VoucherService) AddStock(ctx context.Context, id int64, key string, units int64) (*VoucherView, error) {
	if units < 1 || units > MaxStock {
		return nil, Errorf(ErrInvalidArgument, "add: must be between 1 and %d, got %d", MaxStock, units)
	}
	if n := utf8.RuneCountInString(key); strings.TrimSpace(key) == "" || n > MaxIdempotencyKey || !utf8.ValidString(key) {
		return nil, Errorf(ErrInvalidArgument, "Idempotency-Key: must be 1 to %d characters", MaxIdempotencyKey)
	}
	// A voucher past its retention is not in the ledger, nor rebuilt
	// there: its sale is over, and nothing is added (found by review: the
	// units went into the database, and Redis answered "ask again"
	// forever).
	row, err := s.Store.Voucher(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("add stock to voucher %d: %w", id, err)
	}
	if !s.Clock.Now().Before(row.EndTime.Add(s.RetentionOrDefault())) {
		return nil, Errorf(ErrEnded, "the sale of voucher %d is over: no stock can be added", id)
	}
	view, err := s.control(ctx, id, ControlAddStock, func(ctx context.Context) (*Voucher, error) {
		v, _, recorded, err := s.Store.AddStock(ctx, id, key, units)
		if err != nil {
			return nil, fmt.Errorf("add stock to voucher %d: %w", id, err)
		}
		if recorded != units {
			return nil, Errorf(ErrInvalidArgument, "Idempotency-Key: used already to add %d units, not %d", recorded, units)
		}
		return v, nil
	})
	if err != nil || view.Remaining != nil {
		return view, err
	}
	// Unloaded again by three other additions while this one held the
	// control: the answer says what the ledger holds now.
	return s.Get(ctx, id)
}
