package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newDatabase makes a database file in a directory of its own.
func newDatabase(tb testing.TB) storetest.OpenFunc {
	url := "sqlite://" + filepath.Join(tb.TempDir(), "seckill.db")
	return func(tb testing.TB) seckill.Store {
		tb.Helper()
		s, err := Open(context.Background(), url, 0)
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

func BenchmarkSweep(b *testing.B) { storetest.BenchmarkSweep(b, newDatabase) }
