package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
)

// deadStream is a stream whose connection is cut: ReadOrders finds nothing,
// and WaitOrders's answer never comes, so it returns only when ctx ends.
type deadStream struct {
	Stream
}

func (deadStream) ReadOrders(ctx context.Context, s seckill.Shard, consumer string, count int, block time.Duration) ([]seckill.OrderMessage, error) {
	return nil, nil
}

func (deadStream) WaitOrders(ctx context.Context, s seckill.Shard, block time.Duration) (bool, error) {
	<-ctx.Done()
	return false, ctx.Err()
}

// TestWaitOrdersBounded: a reader waiting for orders on a connection that
// died gives up after its block time and a grace, so that it reads again
// once the network is back, instead of waiting forever.
func TestWaitOrdersBounded(t *testing.T) {
	p, err := New(Config{Consumer: "c", Block: 100 * time.Millisecond}, deadStream{}, nil, nil, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.readBatch(ctx, seckill.Shard{VoucherID: 1}, "")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("readBatch on a dead connection: no error")
		}
	case <-time.After(p.cfg.Block + waitGrace + 5*time.Second):
		cancel()
		<-done
		t.Fatal("readBatch waited on a dead connection past its block time and grace")
	}
}
