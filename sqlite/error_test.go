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

// TestCannotWriteIsTransient checks that a file SQLite cannot write is
// reported as transient, on real SQLite errors: one opened read-only, and
// one whose disk is full (max_page_count stands for a full disk: SQLite
// answers SQLITE_FULL for both).
func TestCannotWriteIsTransient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ro.db")
	ctx := context.Background()
	s, err := Open(ctx, "sqlite://"+path, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, "CREATE TABLE blobs (b BLOB)"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for name, dsn := range map[string]string{
		"read-only": "file:" + path + "?mode=ro",
		// No page more than the file has: a row of 100 KB needs more.
		"full": path + "?_pragma=max_page_count(1)",
	} {
		t.Run(name, func(t *testing.T) {
			db, err := sql.Open("sqlite", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			_, err = db.ExecContext(ctx, "INSERT INTO blobs (b) VALUES (?)", make([]byte, 100_000))
			if err == nil {
				t.Fatal("the insert succeeded")
			}
			got := dbErr(err)
			if !errors.Is(got, seckill.ErrTransient) || !errors.Is(got, err) {
				t.Errorf("dbErr(%v) = %v; want it wrapping ErrTransient and the original error", err, got)
			}
			if isReadOnly(err) != (name == "read-only") {
				t.Errorf("isReadOnly(%v) = %v", err, isReadOnly(err))
			}
		})
	}
}
