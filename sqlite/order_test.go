package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	seckill "github.com/seckill/seckill"
)

// newStore returns a migrated store on a database file of its own.
func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), "sqlite://"+filepath.Join(t.TempDir(), "seckill.db"), 2)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

// newVoucher creates a voucher with the stock.
func newVoucher(t *testing.T, s *Store, stock int64) *seckill.Voucher {
	t.Helper()
	v := &seckill.Voucher{Title: "v", Stock: stock, InitialStock: stock, BeginTime: time.Now(), EndTime: time.Now().Add(time.Hour)}
	if err := s.CreateVoucher(t.Context(), v); err != nil {
		t.Fatalf("CreateVoucher: %v", err)
	}
	return v
}

// The conformance suite sees a created order stay created; only the table
// shows whether FailOrder also wrote the row it must not.
func TestFailOrderOfCreatedOrderWritesNothing(t *testing.T) {
	s := newStore(t)
	v := newVoucher(t, s, 1)
	o := &seckill.Order{ID: 1 << 40, UserID: 1, VoucherID: v.ID}
	if _, err := s.SaveOrders(t.Context(), []*seckill.Order{o}); err != nil {
		t.Fatalf("SaveOrders: %v", err)
	}
	o.Reason = "too late"
	if err := s.FailOrder(t.Context(), o); err != nil {
		t.Fatalf("FailOrder: %v", err)
	}
	var n int
	if err := s.db.QueryRowContext(t.Context(), `SELECT count(*) FROM failed_orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("FailOrder of a created order wrote %d rows to failed_orders; want none", n)
	}
}

// fillOrdersSQL inserts orders 1 to 100,000 of users of the same ids: the
// first 40,000 of voucher ?1, an earlier sale; then one in twenty of
// voucher ?2 and the rest of voucher ?3, two sales at once.
const fillOrdersSQL = `WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 100000)
INSERT INTO orders (id, user_id, voucher_id, status, created_at)
SELECT n, n, CASE WHEN n <= 40000 THEN ?1 WHEN n % 20 = 0 THEN ?2 ELSE ?3 END, 'created', 0 FROM seq`

// TestVoucherOrdersPlan checks that a page of VoucherOrders is a range of
// orders_voucher_id, which ends with the rowid: just the page, wherever it
// is, so that walking a sale of millions of orders takes time linear in
// their number; with statistics and without.
func TestVoucherOrdersPlan(t *testing.T) {
	s := newStore(t)
	earlier, sparse, dense := newVoucher(t, s, 0), newVoucher(t, s, 0), newVoucher(t, s, 0)
	ctx := t.Context()
	if _, err := s.db.ExecContext(ctx, fillOrdersSQL, earlier.ID, sparse.ID, dense.ID); err != nil {
		t.Fatalf("fill orders: %v", err)
	}
	for _, stats := range []bool{false, true} {
		if stats {
			if _, err := s.db.ExecContext(ctx, `ANALYZE`); err != nil {
				t.Fatalf("analyze: %v", err)
			}
		}
		for _, tc := range []struct {
			voucherID, after int64
		}{
			{earlier.ID, 0}, {earlier.ID, 39_500},
			{sparse.ID, 0}, {sparse.ID, 99_000},
			{dense.ID, 0}, {dense.ID, 99_500},
		} {
			plan := queryPlan(ctx, t, s, `EXPLAIN QUERY PLAN `+selectVoucherOrdersSQL, tc.voucherID, tc.after, 1000)
			// The order's voucher, for its pay-by deadline: one probe of the
			// primary key per order returned.
			want := []string{
				"SEARCH o USING INDEX orders_voucher_id (voucher_id=? AND rowid>?)",
				"CORRELATED SCALAR SUBQUERY 1",
				"SEARCH v USING INTEGER PRIMARY KEY (rowid=?)",
			}
			if !slices.Equal(plan, want) {
				t.Errorf("statistics %v: VoucherOrders(%d, %d) plan:\n%s\nwant:\n%s", stats, tc.voucherID, tc.after, strings.Join(plan, "\n"), strings.Join(want, "\n"))
			}
		}
	}
}

// queryPlan returns the details of the rows of an EXPLAIN QUERY PLAN.
func queryPlan(ctx context.Context, t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var (
			id, parent, notUsed int
			detail              string
		)
		if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
			t.Fatalf("explain: %v", err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("explain: %v", err)
	}
	return plan
}
