package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// newStore returns a migrated store on a database of its own.
func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), testenv.MySQLURL(t), 2)
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
	if err := s.db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM failed_orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("FailOrder of a created order wrote %d rows to failed_orders; want none", n)
	}
}

// digits is 0 to 9, for making rows by cross joins (portable, unlike
// MariaDB's seq_ tables, and unlimited, unlike MySQL's recursive CTEs).
const digits = `(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`

// fillOrdersSQL inserts orders 1 to 100,000 of users of the same ids: the
// first 40,000 of one voucher, an earlier sale; then one in twenty of a
// second voucher and the rest of a third, two sales at once.
var fillOrdersSQL = fmt.Sprintf(`INSERT INTO orders (id, user_id, voucher_id, status, created_at)
SELECT n, n, IF(n <= 40000, ?, IF(n %% 20 = 0, ?, ?)), 'created', UTC_TIMESTAMP(6)
FROM (SELECT 1 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n
      FROM %[1]s a, %[1]s b, %[1]s c, %[1]s e, %[1]s f) AS seq`, digits)

// TestVoucherOrdersReadsOnlyThePage checks that a page of VoucherOrders
// costs about its size in rows read, wherever it starts, so that walking a
// sale of millions of orders takes time linear in their number.
func TestVoucherOrdersReadsOnlyThePage(t *testing.T) {
	s := newStore(t)
	earlier, sparse, dense := newVoucher(t, s, 0), newVoucher(t, s, 0), newVoucher(t, s, 0)
	ctx := t.Context()
	if _, err := s.db.ExecContext(ctx, fillOrdersSQL, earlier.ID, sparse.ID, dense.ID); err != nil {
		t.Fatalf("fill orders: %v", err)
	}
	if _, err := s.db.ExecContext(ctx, `ANALYZE TABLE orders`); err != nil {
		t.Fatalf("analyze: %v", err)
	}
	// One connection, whose session counters tell how many rows the
	// query read.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
			before := handlerReads(t, conn)
			rows, err := conn.QueryContext(ctx, selectVoucherOrdersSQL, tc.voucherID, tc.after, limit)
			if err != nil {
				t.Fatalf("VoucherOrders query: %v", err)
			}
			n := 0
			for rows.Next() {
				n++
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("the query returned no orders")
			}
			if read := handlerReads(t, conn) - before; read > 2*limit {
				t.Errorf("a page of %d orders read %d rows; want at most %d: the plan does not seek to the page", n, read, 2*limit)
			}
		})
	}
}

// handlerReads returns how many rows and index entries the session has
// read: those handed to the server (read_next, read_prev, read_rnd_next)
// and those an index condition rejected in the engine.
func handlerReads(t *testing.T, conn *sql.Conn) int64 {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), `SHOW SESSION STATUS WHERE Variable_name IN
('Handler_read_next', 'Handler_read_prev', 'Handler_read_rnd_next', 'Handler_icp_attempts', 'Handler_icp_match')`)
	if err != nil {
		t.Fatalf("session status: %v", err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		var (
			name string
			v    int64
		)
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatalf("session status: %v", err)
		}
		if strings.EqualFold(name, "Handler_icp_match") {
			v = -v
		}
		n += v
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("session status: %v", err)
	}
	return n
}
