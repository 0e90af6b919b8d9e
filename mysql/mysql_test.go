package mysql

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newDatabase makes a database of its own on the test MariaDB.
func newDatabase(tb testing.TB) storetest.OpenFunc { return opener(testenv.MySQLURL(tb)) }

// farDatabase is newDatabase behind a proxy that adds a millisecond to
// each round trip, as a database in the next rack.
func farDatabase(tb testing.TB) storetest.OpenFunc {
	return opener(faults.FarURL(tb, testenv.MySQLURL(tb), time.Millisecond))
}

// opener opens stores on the database of url.
func opener(url string) storetest.OpenFunc {
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

// TestStoreFar runs the suite's races with the database 1 ms away.
func TestStoreFar(t *testing.T) { storetest.RunRaces(t, farDatabase) }

func BenchmarkSaveOrders(b *testing.B) { storetest.BenchmarkSaveOrders(b, newDatabase) }

func BenchmarkPlaceOrder(b *testing.B) { storetest.BenchmarkPlaceOrder(b, newDatabase) }

func BenchmarkSweep(b *testing.B) { storetest.BenchmarkSweep(b, newDatabase) }
