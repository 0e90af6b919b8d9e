package sqlledger_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/app"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/ledgertest"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/postgres"
	"github.com/seckill/seckill/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The SQL ledger on each store: the conformance suite of the ledgers.
func TestLedgerMySQL(t *testing.T) {
	ledgertest.Run(t, harness(func(t *testing.T) (seckill.Store, error) {
		return mysql.Open(context.Background(), testenv.MySQLURL(t), 10)
	}))
}

func TestLedgerPostgres(t *testing.T) {
	ledgertest.Run(t, harness(func(t *testing.T) (seckill.Store, error) {
		return postgres.Open(context.Background(), testenv.PostgresURL(t), 10)
	}))
}

func TestLedgerSQLite(t *testing.T) {
	ledgertest.Run(t, harness(func(t *testing.T) (seckill.Store, error) {
		return sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "seckill.db"), 0)
	}))
}

// harness wires the sync mode's ledger as the service does
// (app.NewOps), on a migrated store that open opens on a database of the
// test's own.
func harness(open func(t *testing.T) (seckill.Store, error)) ledgertest.NewHarness {
	return func(t *testing.T) *ledgertest.Harness {
		t.Helper()
		store, err := open(t)
		if err != nil {
			t.Fatalf("open the store: %v", err)
		}
		t.Cleanup(func() { store.Close() })
		if err := store.Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		ops := app.NewOps(seckill.ModeSync, 0, store, nil, testenv.Logger(t))
		return &ledgertest.Harness{Ledger: ops.Ledger, Vouchers: ops.Vouchers, Store: store, InDatabase: true}
	}
}
