package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A row inserted as before shards (without their columns, as a voucher made
// before migration 0005 is) reads as an unsharded voucher.
func TestVoucherMadeBeforeShards(t *testing.T) {
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
}

// A row inserted as before payment rules (without their columns, as a
// voucher made before migration 0006 is) reads with no pay deadline and no
// rebuy after a cancel: today's behaviour.
func TestVoucherMadeBeforePayment(t *testing.T) {
	s := newStore(t)
	now := now()
	var id int64
	err := s.with(t.Context(), func(conn *pgx.Conn) error {
		return conn.QueryRow(t.Context(), `INSERT INTO vouchers (title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags)
VALUES ('old', 3, 3, $1, $2, $3, 7, 1, '') RETURNING id`, now, now.Add(time.Hour), now).Scan(&id)
	})
	if err != nil {
		t.Fatalf("insert a row as before payment rules: %v", err)
	}
	v, err := s.Voucher(t.Context(), id)
	if err != nil {
		t.Fatalf("Voucher(%d): %v", id, err)
	}
	if v.PayWithin != 0 || v.RebuyAfterCancel {
		t.Errorf("a voucher made before payment rules reads PayWithin %v, RebuyAfterCancel %v; want 0 and false", v.PayWithin, v.RebuyAfterCancel)
	}
}
