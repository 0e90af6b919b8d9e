package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A row inserted as before shards and payment rules (without their
// columns, as a voucher made before migrations 0005 and 0006 is) reads as
// an unsharded voucher with no pay deadline and no rebuy after a cancel:
// today's behaviour.
func TestVoucherMadeBeforeNewColumns(t *testing.T) {
	s := newStore(t)
	now := now()
	var id int64
	err := s.with(t.Context(), func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), `INSERT INTO vouchers (title, stock, initial_stock, begin_time, end_time, created_at, generation)
VALUES ('old', 3, 3, $1, $2, $3, 7) RETURNING id`, now, now.Add(time.Hour), now).Scan(&id)
	})
	if err != nil {
		t.Fatalf("insert a row as before shards: %v", err)
	}
	v, err := s.Voucher(t.Context(), id)
	if err != nil {
		t.Fatalf("Voucher(%d): %v", id, err)
	}
	if v.Shards != 1 || v.ShardTags != nil {
		t.Errorf("a voucher made before shards reads Shards %d, ShardTags %q; want 1 and nil", v.Shards, v.ShardTags)
	}
	if v.PayWithin != 0 || v.RebuyAfterCancel {
		t.Errorf("a voucher made before payment rules reads PayWithin %v, RebuyAfterCancel %v; want 0 and false", v.PayWithin, v.RebuyAfterCancel)
	}
}
