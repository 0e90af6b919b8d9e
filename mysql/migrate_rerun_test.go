package mysql

import (
	"context"
	"testing"

	"github.com/seckill/seckill/internal/testenv"
)

// TestMigrateOrderAmountRunsAgainAfterHalf: a crash (or a lock-wait
// timeout on a live orders table) after 0013's ALTER committed but before
// its UPDATE and version record; Migrate runs 0013 again whole.
func TestMigrateOrderAmountRunsAgainAfterHalf(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, testenv.MySQLURL(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// Half-applied 0013: ALTER committed, version not recorded.
	if _, err := s.db.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = 13`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after a half-applied 0013: %v", err)
	}
}
