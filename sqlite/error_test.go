package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	seckill "github.com/seckill/seckill"
)

// TestBusyIsTransient checks that a write lock held past the busy timeout
// is reported as transient, on a real SQLite error.
func TestBusyIsTransient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	// Raw handles without the store's busy timeout, so that the second
	// writer fails at once.
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", path+"?_txlock=immediate&_pragma=journal_mode(WAL)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	holder, other := open(), open()
	ctx := context.Background()
	tx, err := holder.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback()
	_, err = other.BeginTx(ctx, nil)
	if err == nil {
		t.Fatal("a second writer began while the first held the lock")
	}
	got := dbErr(err)
	if !errors.Is(got, seckill.ErrTransient) || !errors.Is(got, err) {
		t.Errorf("dbErr(%v) = %v; want it wrapping ErrTransient and the original error", err, got)
	}
}

func TestDBErrPassesOthers(t *testing.T) {
	for _, err := range []error{nil, context.Canceled, errors.New("something else")} {
		if got := dbErr(err); got != err {
			t.Errorf("dbErr(%v) = %v; want it unchanged", err, got)
		}
	}
}
