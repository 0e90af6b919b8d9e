package postgres

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
	storetest.ReadOnlyConnectionsClosed(t, testenv.PostgresURL(t), faults.PostgresReadOnly,
		func(ctx context.Context, url string, maxConns int) (seckill.Store, error) {
			return Open(ctx, url, maxConns)
		})
}
