package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// TestGroupCommitSubMillisecondWaitTimeout: a WaitTimeout under a
// millisecond (Config and --redis-wait-timeout accept 500µs) must not
// become WAIT n 0, which Redis reads as "block until n replicas ack, for
// ever". With the replica stopped, the admission is to be answered 503
// about its timeout; a WAIT 0 holds the batch's lane until the batch's own
// context (WaitTimeout + batchSlack, 2 s) kills the connection, and on the
// paths without that context (admitReplicated on a Cluster whose master
// rueidis does not know, runBatch's fallback with context.Background(),
// transfers' takeReplicated) it never returns while the replica lags.
func TestGroupCommitSubMillisecondWaitTimeout(t *testing.T) {
	t.Parallel()
	c, _, replica := replicatedPair(t, 500*time.Microsecond, 1)
	mustLoad(t, c, onSale(1, 10))
	replica.Pause()
	defer replica.Resume()

	start := time.Now()
	err := c.Admit(context.Background(), seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 101})
	took := time.Since(start)
	var e *seckill.Error
	if !errors.As(err, &e) || e.Kind != seckill.ErrUnavailable {
		t.Fatalf("Admit with the replica stopped = %v, want a final ErrUnavailable", err)
	}
	if took > time.Second {
		t.Errorf("Admit with a 500µs WaitTimeout and the replica stopped took %s: the WAIT was sent with timeout 0 (for ever) and only the batch's context ended it", took.Round(time.Millisecond))
	}
}
