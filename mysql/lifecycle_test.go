package mysql

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/migrate"
	"github.com/seckill/seckill/internal/testenv"
)

// An order written before migration 0007 (its row then had none of the
// lifecycle's columns), migrated, reads as created with nothing of the
// lifecycle set, and still holds its buyer's slot: the migration gave it
// slot 1. It has no written_at, so its PayBy counts from its creation, and
// no sweep takes it.
func TestOrderMadeBeforeLifecycle(t *testing.T) {
	s, err := Open(t.Context(), testenv.MySQLURL(t), 2)
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
		if _, err := s.db.ExecContext(ctx, insertVersionSQL, m.Version, m.Name, now()); err != nil {
			t.Fatal(err)
		}
	}
	v := &seckill.Voucher{Title: "v", Stock: 9, InitialStock: 10, BeginTime: now(), EndTime: now().Add(time.Hour), PayWithin: time.Minute}
	// Inserted as the schema of 0006 has it: CreateVoucher writes the
	// columns of later migrations.
	res, err := s.db.ExecContext(ctx, `INSERT INTO vouchers (title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel)
VALUES (?, ?, ?, ?, ?, ?, 0, 1, '', 60, 0)`, v.Title, v.Stock, v.InitialStock, utc(v.BeginTime), utc(v.EndTime), now())
	if err != nil {
		t.Fatal(err)
	}
	if v.ID, err = res.LastInsertId(); err != nil {
		t.Fatal(err)
	}
	created := now()
	if _, err := s.db.ExecContext(ctx, `INSERT INTO orders (id, user_id, voucher_id, status, created_at) VALUES (7, 1, ?, 'created', ?)`, v.ID, created); err != nil {
		t.Fatalf("insert an order as before 0007: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from 0006: %v", err)
	}

	want := &seckill.Order{ID: 7, UserID: 1, VoucherID: v.ID, Status: seckill.OrderCreated, CreatedAt: created, PayBy: created.Add(time.Minute)}
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
}

// A sweep skips a due order another transaction holds (a buyer's cancel
// or payment in flight, another sweep), instead of waiting for it, and
// takes the others; the next sweep takes it.
func TestCancelDueSkipsLocked(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	v := &seckill.Voucher{Title: "v", Stock: 3, InitialStock: 3, BeginTime: now(), EndTime: now().Add(time.Hour), PayWithin: time.Minute}
	if err := s.CreateVoucher(ctx, v); err != nil {
		t.Fatal(err)
	}
	created := now().Add(-time.Hour)
	os := []*seckill.Order{
		{ID: 1, UserID: 1, VoucherID: v.ID, CreatedAt: created},
		{ID: 2, UserID: 2, VoucherID: v.ID, CreatedAt: created.Add(time.Second)},
		{ID: 3, UserID: 3, VoucherID: v.ID, CreatedAt: created.Add(2 * time.Second)},
	}
	if _, err := s.SaveOrders(ctx, os); err != nil {
		t.Fatal(err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT id FROM orders WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	// Waiting for the lock would take innodb_lock_wait_timeout (50 s).
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	due, err := s.CancelDue(wctx, v.ID, now(), now(), now(), 10)
	if err != nil {
		t.Fatalf("CancelDue with order 1 locked: %v", err)
	}
	if len(due) != 2 || due[0].ID != 2 || due[1].ID != 3 {
		t.Errorf("CancelDue with order 1 locked took %d orders; want 2 and 3", len(due))
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	due, err = s.CancelDue(ctx, v.ID, now(), now(), now(), 10)
	if err != nil || len(due) != 1 || due[0].ID != 1 {
		t.Errorf("CancelDue once order 1 is free = %v, %v; want order 1", due, err)
	}
}

// fillSweepSQL inserts orders 1 to 1,000,000 of users of the same ids:
// 600,000 of voucher ?1, written an hour ago (another sale, as due as
// can be); then of voucher ?2, the one swept, 1,000 written an hour ago
// (due), 299,000 paid and 100,000 written an hour on (not due). Each is
// created when it is written.
var fillSweepSQL = fmt.Sprintf(`INSERT INTO orders (id, user_id, voucher_id, status, created_at, written_at)
SELECT n, n, IF(n <= 600000, ?, ?),
       IF(n > 601000 AND n <= 900000, 'paid', 'created'), t, t
FROM (SELECT n, IF(n > 900000, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL n MICROSECOND) AS t
      FROM (SELECT 1 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d AS n
            FROM %[1]s a, %[1]s b, %[1]s c, %[1]s e, %[1]s f, %[1]s g) AS seq) AS nt`, digits)

// resetDueSQL makes the 1,000 due orders of fillSweepSQL created again.
const resetDueSQL = `UPDATE orders SET status = 'created', reason = '', cancelled_at = NULL, slot = 1
WHERE id > 600000 AND id <= 601000`

// BenchmarkCancelDue measures a sweep of 500 due orders of a voucher with
// a million orders in the table (fillSweepSQL): the due ones are a range of
// orders_voucher_status, read and locked in the order they were written,
// whatever the rest. It
// logs the plan of the sweep's read.
func BenchmarkCancelDue(b *testing.B) {
	if testing.Short() {
		b.Skip("fills a million orders")
	}
	s, err := Open(b.Context(), testenv.MySQLURL(b), 4)
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := b.Context()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	var vs [2]*seckill.Voucher
	for i := range vs {
		vs[i] = &seckill.Voucher{Title: "v", BeginTime: now(), EndTime: now().Add(time.Hour), PayWithin: time.Minute}
		if err := s.CreateVoucher(ctx, vs[i]); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.db.ExecContext(ctx, fillSweepSQL, vs[0].ID, vs[1].ID); err != nil {
		b.Fatalf("fill orders: %v", err)
	}
	if _, err := s.db.ExecContext(ctx, `ANALYZE TABLE orders`); err != nil {
		b.Fatal(err)
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d orders in the table", n)
	rows, err := s.db.QueryContext(ctx, `EXPLAIN `+selectDueSQL, 60, vs[1].ID, now(), now(), 500)
	if err != nil {
		b.Fatal(err)
	}
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			b.Fatal(err)
		}
		var line []string
		for i, c := range cols {
			if bs, ok := vals[i].([]byte); ok {
				vals[i] = string(bs)
			}
			line = append(line, fmt.Sprintf("%s=%v", c, vals[i]))
		}
		b.Log("EXPLAIN: " + strings.Join(line, " "))
	}
	rows.Close()

	for b.Loop() {
		b.StopTimer()
		if _, err := s.db.ExecContext(ctx, resetDueSQL); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		due, err := s.CancelDue(ctx, vs[1].ID, now(), now(), now(), 500)
		if err != nil || len(due) != 500 {
			b.Fatalf("CancelDue = %d orders, %v; want 500", len(due), err)
		}
	}
}

// fillSettledSQL inserts orders first to first + 59,999 (the first two
// arguments) of users of the same ids, 20,000 of each of the three
// vouchers of the next arguments, all settled: the even paid, the odd
// cancelled with their unit marked returned.
var fillSettledSQL = fmt.Sprintf(`INSERT INTO orders (id, user_id, voucher_id, status, reason, created_at, written_at,
    paid_at, payment_ref, cancelled_at, returned_at)
SELECT ? + n, ? + n, ELT(1 + n %% 3, ?, ?, ?), IF(n %% 2 = 0, 'paid', 'cancelled'), IF(n %% 2 = 0, '', 'not paid by the deadline'),
       t, t, IF(n %% 2 = 0, t, NULL), IF(n %% 2 = 0, 'paid', ''), IF(n %% 2 = 0, NULL, t), IF(n %% 2 = 0, NULL, t)
FROM (SELECT n, UTC_TIMESTAMP(6) - INTERVAL 1 DAY AS t
      FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n
            FROM %[1]s a, %[1]s b, %[1]s c, %[1]s e, %[1]s f) AS seq WHERE n < 60000) AS nt`, digits)

// TestDeadlineVouchersReadsNoSettledOrders: DeadlineVouchers reads no
// settled order of a voucher with a deadline, whatever the statistics
// say: the rows its statement
// reads (Handler_read_next, on the store's one connection) do not grow
// with the 60,000 settled orders of three ended vouchers, which it leaves
// out, beside one with a created order, which it lists.
func TestDeadlineVouchersReadsNoSettledOrders(t *testing.T) {
	s, err := Open(t.Context(), testenv.MySQLURL(t), 1) // one connection: its session's counters are the statement's
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var vs [4]*seckill.Voucher
	for i := range vs {
		vs[i] = &seckill.Voucher{Title: "v", Stock: 1, InitialStock: 1, BeginTime: now(), EndTime: now().Add(time.Hour), PayWithin: time.Minute}
		if err := s.CreateVoucher(ctx, vs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.db.ExecContext(ctx, fillSettledSQL, 1_000_000, 1_000_000, vs[0].ID, vs[1].ID, vs[2].ID); err != nil {
		t.Fatalf("fill settled orders: %v", err)
	}
	if _, err := s.SaveOrders(ctx, []*seckill.Order{{ID: 1, UserID: 1, VoucherID: vs[3].ID, CreatedAt: now()}}); err != nil {
		t.Fatal(err)
	}
	readNext := func() (conn, n int64) {
		t.Helper()
		var name string
		if err := s.db.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&conn); err != nil {
			t.Fatal(err)
		}
		if err := s.db.QueryRowContext(ctx, `SHOW SESSION STATUS LIKE 'Handler_read_next'`).Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return conn, n
	}
	// Before the table's statistics count the settled orders (right after
	// a sale), and after.
	for _, when := range []string{"before ANALYZE", "after ANALYZE"} {
		if when == "after ANALYZE" {
			if _, err := s.db.ExecContext(ctx, `ANALYZE TABLE orders`); err != nil {
				t.Fatal(err)
			}
		}
		conn0, before := readNext()
		got, err := s.DeadlineVouchers(ctx)
		conn1, after := readNext()
		if err != nil {
			t.Fatalf("DeadlineVouchers: %v", err)
		}
		if conn0 != conn1 {
			t.Fatalf("the store's connection changed (%d, then %d): the counters are not one session's", conn0, conn1)
		}
		if len(got) != 1 || got[0].ID != vs[3].ID {
			t.Errorf("%s: DeadlineVouchers = %d vouchers; want voucher %d alone", when, len(got), vs[3].ID)
		}
		if read := after - before; read >= 100 {
			t.Errorf("%s: DeadlineVouchers read %d index entries (Handler_read_next) beside 60,000 settled orders; want under 100, none of them", when, read)
		} else {
			t.Logf("%s: DeadlineVouchers read %d index entries (Handler_read_next)", when, read)
		}
	}
}
