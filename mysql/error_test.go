package mysql

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/testenv"
)

// TestCommitAfterContextEnded: a transaction whose context ended after its
// last statement is rolled back by database/sql, and its commit answers
// the context's error (a request that took too long), not sql.ErrTxDone
// (which the HTTP layer answered 500); nothing is committed.
func TestCommitAfterContextEnded(t *testing.T) {
	t.Parallel()
	st := newDatabase(t)(t).(*Store)
	bg := context.Background()
	if _, err := st.db.ExecContext(bg, "CREATE TABLE probe (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO probe VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	cancel()
	// database/sql rolls the transaction back once it sees the context
	// end: wait for that, so that Commit meets a finished transaction.
	testenv.WaitFor(t, 10*time.Second, "the transaction rolled back", func() bool {
		_, err := tx.ExecContext(bg, "SELECT 1")
		return errors.Is(err, sql.ErrTxDone)
	})
	if err := commit(ctx, tx); !errors.Is(err, context.Canceled) {
		t.Errorf("commit after the context ended = %v, want context.Canceled", err)
	}
	var n int
	if err := st.db.QueryRowContext(bg, "SELECT COUNT(*) FROM probe").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows committed (%v), want none", n, err)
	}
}
