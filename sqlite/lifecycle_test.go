package sqlite

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/migrate"
)

// An order written before migration 0007 (its row then had none of the
// lifecycle's columns), migrated (orders made again, and filled from the
// old table), reads as created with nothing of the lifecycle set, and still
// holds its buyer's slot: the migration gave it slot 1. It has no
// written_at, so its PayBy counts from its creation, and no sweep takes it.
func TestOrderMadeBeforeLifecycle(t *testing.T) {
	s, err := Open(t.Context(), "sqlite://"+filepath.Join(t.TempDir(), "seckill.db"), 2)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	ms, err := migrate.Load(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, createMigrationsTableSQL); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:6] {
		for _, stmt := range m.Statements {
			if _, err := s.db.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("migration %d: %v", m.Version, err)
			}
		}
		if _, err := s.db.ExecContext(ctx, insertVersionSQL, m.Version, m.Name, micros(now())); err != nil {
			t.Fatal(err)
		}
	}
	v := &seckill.Voucher{Title: "v", Stock: 9, InitialStock: 10, BeginTime: now(), EndTime: now().Add(time.Hour), PayWithin: time.Minute}
	// Inserted as the schema of 0006 has it: CreateVoucher writes the
	// columns of later migrations.
	if err := s.db.QueryRowContext(ctx, `INSERT INTO vouchers (title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel)
VALUES (?, ?, ?, ?, ?, ?, 0, 1, '', 60, 0) RETURNING id`, v.Title, v.Stock, v.InitialStock, micros(v.BeginTime), micros(v.EndTime), micros(now())).Scan(&v.ID); err != nil {
		t.Fatal(err)
	}
	created := now()
	if _, err := s.db.ExecContext(ctx, `INSERT INTO orders (id, user_id, voucher_id, status, reason, created_at) VALUES (7, 1, ?, 'created', 'kept', ?)`, v.ID, micros(created)); err != nil {
		t.Fatalf("insert an order as before 0007: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from 0006: %v", err)
	}

	want := &seckill.Order{ID: 7, UserID: 1, VoucherID: v.ID, Status: seckill.OrderCreated, Reason: "kept", CreatedAt: created, PayBy: created.Add(time.Minute)}
	got, err := s.Order(ctx, 7)
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("Order(7): %v (-want +got):\n%s", err, diff)
	}
	outcomes, err := s.SaveOrders(ctx, []*seckill.Order{{ID: 8, UserID: 1, VoucherID: v.ID}})
	if err != nil || outcomes[0] != seckill.BuyerConflict {
		t.Errorf("SaveOrders of another order of the buyer = %v, %v; want %v", outcomes, err, seckill.BuyerConflict)
	}
	// It has no written_at: a sweep never takes it.
	if due, err := s.CancelDue(ctx, v.ID, now().Add(time.Hour), now().Add(time.Hour), now(), 10); err != nil || len(due) != 0 {
		t.Errorf("CancelDue of an order from before 0007 = %v, %v; want none", due, err)
	}
	if o, err := s.CancelOrder(ctx, 7, seckill.ReasonBuyerCancelled, now()); err != nil || o.Status != seckill.OrderCancelled {
		t.Errorf("CancelOrder(7) = %+v, %v; want it cancelled", o, err)
	}
	if got := s.checkForeignKeys(t); got != 0 {
		t.Errorf("PRAGMA foreign_key_check found %d rows after the migration", got)
	}
}

// checkForeignKeys counts the rows PRAGMA foreign_key_check reports.
func (s *Store) checkForeignKeys(t *testing.T) int {
	t.Helper()
	rows, err := s.db.QueryContext(t.Context(), `PRAGMA foreign_key_check`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCancelDuePlan checks that a sweep reads the due orders as a range of
// orders_voucher_status in the order they were written: no sort, however many orders
// the voucher has; and that the counts read that index alone.
func TestCancelDuePlan(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	plan := queryPlan(ctx, t, s, `EXPLAIN QUERY PLAN `+selectDueSQL, 0, 1, 0, 0, 10)
	want := []string{"SEARCH o USING INDEX orders_voucher_status (voucher_id=? AND status=? AND returned_at=? AND written_at<?)"}
	if !slices.Equal(plan, want) {
		t.Errorf("CancelDue plan:\n%s\nwant:\n%s", strings.Join(plan, "\n"), strings.Join(want, "\n"))
	}
	plan = queryPlan(ctx, t, s, `EXPLAIN QUERY PLAN `+countLifecycleSQL, 1)
	if len(plan) == 0 || !strings.Contains(plan[0], "USING COVERING INDEX orders_voucher_status") {
		t.Errorf("LifecycleCounts plan:\n%s\nwant a covering read of orders_voucher_status", strings.Join(plan, "\n"))
	}
}
