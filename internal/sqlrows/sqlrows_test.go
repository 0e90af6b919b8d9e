package sqlrows_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/seckill/seckill/internal/sqlrows"
)

// db returns an in-memory database with a table t of (id, name) rows 1 a,
// 2 b, 3 c.
func db(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// One connection: each would have a memory database of its own.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')`); err != nil {
		t.Fatal(err)
	}
	return db
}

type row struct {
	ID   int64
	Name string
}

func scanRow(s sqlrows.Scanner) (row, error) {
	var r row
	err := s.Scan(&r.ID, &r.Name)
	return r, err
}

func TestQuery(t *testing.T) {
	t.Parallel()
	db := db(t)
	got, err := sqlrows.Query(t.Context(), db, scanRow, `SELECT id, name FROM t WHERE id >= ? ORDER BY id`, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]row{{2, "b"}, {3, "c"}}, got); diff != "" {
		t.Errorf("Query (-want +got):\n%s", diff)
	}

	got, err = sqlrows.Query(t.Context(), db, scanRow, `SELECT id, name FROM t WHERE id > 3`)
	if err != nil || got != nil {
		t.Errorf("Query of no rows = %v, %v; want nil, nil", got, err)
	}

	// In a transaction too: the Querier of a *sql.Tx.
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ids, err := sqlrows.Query(t.Context(), tx, sqlrows.Scalar[int64], `SELECT id FROM t ORDER BY id DESC`)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{3, 2, 1}, ids); diff != "" {
		t.Errorf("Query of Scalar (-want +got):\n%s", diff)
	}
}

func TestQueryErrors(t *testing.T) {
	t.Parallel()
	db := db(t)
	if got, err := sqlrows.Query(t.Context(), db, scanRow, `SELECT id, name FROM missing`); err == nil {
		t.Errorf("Query of a missing table = %v, want an error", got)
	}
	errScan := errors.New("scan")
	scan := func(s sqlrows.Scanner) (row, error) {
		r, err := scanRow(s)
		if err == nil && r.ID == 2 {
			return row{}, errScan
		}
		return r, err
	}
	if got, err := sqlrows.Query(t.Context(), db, scan, `SELECT id, name FROM t ORDER BY id`); !errors.Is(err, errScan) || got != nil {
		t.Errorf("Query with a failing scan = %v, %v; want nil, %v", got, err, errScan)
	}
	// A column that does not convert: the driver's error.
	if got, err := sqlrows.Query(t.Context(), db, sqlrows.Scalar[int64], `SELECT name FROM t`); err == nil {
		t.Errorf("Query of text as int64 = %v, want an error", got)
	}
}

func TestQueryMap(t *testing.T) {
	t.Parallel()
	db := db(t)
	m := map[int64]string{9: "kept", 1: "replaced"}
	if err := sqlrows.QueryMap(t.Context(), db, m, `SELECT id, name FROM t WHERE id IN (?, ?)`, 1, 3); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int64]string{1: "a", 3: "c", 9: "kept"}, m); diff != "" {
		t.Errorf("QueryMap (-want +got):\n%s", diff)
	}
	if err := sqlrows.QueryMap(t.Context(), db, m, `SELECT id FROM t`); err == nil {
		t.Error("QueryMap of one column: no error")
	}
}

func TestPlaceholders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		group string
		n     int
		want  string
	}{
		{"?", 0, ""},
		{"?", 1, "?"},
		{"?", 3, "?, ?, ?"},
		{"(?, ?)", 2, "(?, ?), (?, ?)"},
	} {
		if got := sqlrows.Placeholders(tc.group, tc.n); got != tc.want {
			t.Errorf("Placeholders(%q, %d) = %q, want %q", tc.group, tc.n, got, tc.want)
		}
	}
}
