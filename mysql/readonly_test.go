package mysql

import (
	"context"
	"testing"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/storetest"
)

func TestReadOnlyConnectionsClosed(t *testing.T) {
	t.Parallel()
	storetest.ReadOnlyConnectionsClosed(t, testenv.MySQLURL(t),
		func(t testing.TB, dbURL string) *faults.ReadOnlyDB {
			return faults.MySQLReadOnly(t, dbURL, faults.SessionsReadOnly)
		},
		func(ctx context.Context, url string, maxConns int) (seckill.Store, error) {
			return Open(ctx, url, maxConns)
		})
}
