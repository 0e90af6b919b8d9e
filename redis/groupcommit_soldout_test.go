package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// TestGroupCommitSoldOutWaitsForNoReplica is what a sold_out promises
// with admissions that wait for replicas (docs/guarantees.md): the
// master's stock was 0 when the script ran, and nothing more. It waits
// for no WAIT: buyer 1 takes the last unit while the replica is stopped
// and is still waiting for the WAIT that would confirm it when buyer 2 is
// answered sold out. The master then dies and that replica, which never
// got the unit taken, is promoted: the unit is back, buyer 1 is answered
// 503 (not confirmed), and buyer 2, told sold out, buys it on a retry.
// Should sold-out answers come to wait for a WAIT, this test fails, and
// the documented promise is to be changed with it.
func TestGroupCommitSoldOutWaitsForNoReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The replica follows the master through a proxy that can hold its
	// stream: a replica that lags, its link up. A process stopped with
	// SIGSTOP would not do: what the master sent before it died waits in
	// the stopped replica's socket, and it reads it once resumed.
	master := faults.StartRedisProc(t, "--repl-diskless-sync-delay", "0")
	link := faults.StartProxy(t, master.Addr)
	host, port, _ := strings.Cut(link.Addr(), ":")
	replica := faults.StartRedisProc(t, "--replicaof", host, port)
	testenv.WaitFor(t, defaultWait, "the replica to sync", func() bool {
		return replica.Role() == "slave" && testenvField(replica.Info("replication"), "master_link_status") == "up"
	})
	// A WAIT far longer than the test: buyer 1 is answered by the kill.
	c, err := Open(ctx, Config{URL: "redis://" + master.Addr, WaitReplicas: 1, WaitTimeout: 10 * time.Minute}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	mustLoad(t, c, onSale(1, 1))
	stockKey := c.keys.voucher(1).Stock
	testenv.WaitFor(t, defaultWait, "the replica to have the voucher", func() bool {
		v, err := replica.Do(ctx, "GET", stockKey)
		return err == nil && v == "1"
	})
	link.Pause()

	first := make(chan error, 1)
	go func() { first <- c.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 1, OrderID: 101}) }()
	testenv.WaitFor(t, defaultWait, "buyer 1 to take the last unit on the master", func() bool {
		v, err := master.Do(ctx, "GET", stockKey)
		return err == nil && v == "0"
	})
	// Bounded: a sold out that waited for buyer 1's WAIT would wait for
	// the kill.
	askCtx, cancel := context.WithTimeout(ctx, defaultWait)
	soldOut := c.Admit(askCtx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 102})
	cancel()
	select {
	case err := <-first:
		t.Errorf("buyer 1 was answered (%v) before buyer 2's sold out: no WAIT could confirm it with the replica stopped", err)
	default:
	}
	errKind(t, soldOut, seckill.ErrSoldOut)

	master.Kill()
	link.Down() // what it held is dropped
	if err := <-first; !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("buyer 1, whose unit no replica had when the master died: %v, want ErrUnavailable (not confirmed)", err)
	}
	if _, err := replica.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}
	if v, err := replica.Do(ctx, "GET", stockKey); err != nil || v != "1" {
		t.Fatalf("the promoted replica's stock = %v (%v), want 1: the unit buyer 1 took never reached it", v, err)
	}
	promoted, err := Open(ctx, Config{URL: "redis://" + replica.Addr}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(promoted.Close)
	arm(t, promoted)
	if err := promoted.Admit(ctx, seckill.Admission{VoucherID: 1, UserID: 2, OrderID: 103}); err != nil {
		t.Errorf("buyer 2, answered sold out before the failover, asks again on the promoted replica: %v, want admitted", err)
	}
}
