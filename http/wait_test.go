package http_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
)

// TestBuyNotConfirmed: with --redis-wait-replicas 1 and the replica
// stopped, a buy is answered 503, and its message sends the buyer to their
// orders before they buy elsewhere: the admission stands on the master. GET
// /api/orders shows it pending, then created once a worker persisted it.
func TestBuyNotConfirmed(t *testing.T) {
	t.Parallel()
	master := faults.StartRedisProc(t)
	replica := faults.StartRedisProc(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	testenv.WaitFor(t, 30*time.Second, "the replica to sync", func() bool {
		return strings.Contains(replica.Info("replication"), "master_link_status:up")
	})
	e := newEnv(t, envOptions{redisURL: "redis://" + master.Addr, waitReplicas: 1, holdWorkers: true})
	id := e.createVoucher(e.validVoucher())["id"].(string)

	replica.Pause()
	defer replica.Resume()
	res := e.do("POST", "/api/vouchers/"+id+"/seckill", e.buyer, nil)
	e.wantError(res, 503, "unavailable")
	if msg, _ := res.body["message"].(string); !strings.Contains(msg, "GET /api/orders") {
		t.Errorf("the 503's message is %q: want it to send the buyer to GET /api/orders before buying elsewhere", msg)
	}
	if res.header.Get("Retry-After") == "" {
		t.Error("the 503 has no Retry-After")
	}

	order := func() map[string]any {
		list := e.do("GET", "/api/orders", e.buyer, nil)
		orders, _ := list.body["orders"].([]any)
		if list.status != 200 || len(orders) != 1 {
			t.Fatalf("GET /api/orders = %d %s; want the one order, not confirmed but made", list.status, list.raw)
		}
		o := orders[0].(map[string]any)
		if o["voucherId"] != id {
			t.Fatalf("GET /api/orders lists %s, want an order of voucher %s", list.raw, id)
		}
		return o
	}
	if o := order(); o["status"] != "pending" {
		t.Errorf("the order reads %v before a worker ran, want pending", o["status"])
	}
	e.startPool()
	testenv.WaitFor(t, 30*time.Second, "the order created", func() bool { return order()["status"] == "created" })
}
