package postgres

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newDatabase makes a schema of its own on the test PostgreSQL.
func newDatabase(tb testing.TB) storetest.OpenFunc {
	url := testenv.PostgresURL(tb)
	return func(tb testing.TB) seckill.Store {
		tb.Helper()
		s, err := Open(context.Background(), url, 10)
		if err != nil {
			tb.Fatalf("Open(%s): %v", url, err)
		}
		tb.Cleanup(func() {
			if err := s.Close(); err != nil {
				tb.Errorf("Close: %v", err)
			}
		})
		return s
	}
}

func TestStore(t *testing.T) { storetest.Run(t, newDatabase) }

func BenchmarkSaveOrders(b *testing.B) { storetest.BenchmarkSaveOrders(b, newDatabase) }

func BenchmarkPlaceOrder(b *testing.B) { storetest.BenchmarkPlaceOrder(b, newDatabase) }
