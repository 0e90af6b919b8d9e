package postgres

import (
	"encoding/json"
	"testing"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// newStore returns a migrated store on a schema of its own.
func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), testenv.PostgresURL(t), 2)
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
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM failed_orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("FailOrder of a created order wrote %d rows to failed_orders; want none", n)
	}
}

// fillOrdersSQL inserts orders 1 to 100,000 of users of the same ids: the
// first 40,000 of voucher $1, an earlier sale; then one in twenty of
// voucher $2 and the rest of voucher $3, two sales at once.
const fillOrdersSQL = `INSERT INTO orders (id, user_id, voucher_id, status, created_at)
SELECT n, n, CASE WHEN n <= 40000 THEN $1::bigint WHEN n % 20 = 0 THEN $2::bigint ELSE $3::bigint END, 'created', now()
FROM generate_series(1, 100000) AS n`

// planNode is the part of a node of EXPLAIN (ANALYZE, FORMAT JSON) that
// the test reads.
type planNode struct {
	NodeType    string     `json:"Node Type"`
	ActualRows  int64      `json:"Actual Rows"`
	RowsRemoved int64      `json:"Rows Removed by Filter"`
	Plans       []planNode `json:"Plans"`
}

// TestVoucherOrdersReadsOnlyThePage checks that a page of VoucherOrders
// costs about its size in rows read, wherever it starts, so that walking a
// sale of millions of orders takes time linear in their number: no sort of
// the voucher's orders, no scan that filters out other vouchers' orders.
func TestVoucherOrdersReadsOnlyThePage(t *testing.T) {
	s := newStore(t)
	earlier, sparse, dense := newVoucher(t, s, 0), newVoucher(t, s, 0), newVoucher(t, s, 0)
	ctx := t.Context()
	if _, err := s.pool.Exec(ctx, fillOrdersSQL, earlier.ID, sparse.ID, dense.ID); err != nil {
		t.Fatalf("fill orders: %v", err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE orders`); err != nil {
		t.Fatalf("analyze: %v", err)
	}
	const limit = 1000
	for _, tc := range []struct {
		name      string
		voucherID int64
		after     int64
	}{
		{"earlier, first page", earlier.ID, 0},
		{"earlier, middle", earlier.ID, 20_000},
		{"earlier, last page", earlier.ID, 39_500},
		{"sparse, first page", sparse.ID, 0},
		{"sparse, middle", sparse.ID, 70_000},
		{"sparse, last page", sparse.ID, 99_000},
		{"dense, first page", dense.ID, 0},
		{"dense, middle", dense.ID, 70_000},
		{"dense, last page", dense.ID, 99_500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out []byte
			err := s.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+selectVoucherOrdersSQL, planned,
				tc.voucherID, tc.after, limit).Scan(&out)
			if err != nil {
				t.Fatalf("explain: %v", err)
			}
			var plans []struct{ Plan planNode }
			if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
				t.Fatalf("explain output %s: %v", out, err)
			}
			var walk func(n planNode)
			walk = func(n planNode) {
				if read := n.ActualRows + n.RowsRemoved; read > 2*limit {
					t.Errorf("for a page of %d orders, the plan's %s read %d rows; want at most %d: it does not seek to the page:\n%s",
						limit, n.NodeType, read, 2*limit, out)
				}
				for _, c := range n.Plans {
					walk(c)
				}
			}
			walk(plans[0].Plan)
			if plans[0].Plan.ActualRows == 0 {
				t.Errorf("the query returned no orders:\n%s", out)
			}
		})
	}
}
