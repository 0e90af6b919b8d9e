package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// admitReplicated runs the admission script and then WAIT for
// Config.WaitReplicas replicas, on one connection of its own: an
// admission alone, where no batch can take it (groupcommit.go), or with
// no Batcher set.
//
// WAIT counts only the writes of the connection it runs on, and blocks that
// connection until it returns: on the shared, pipelined connections it
// would cover other requests' writes and stall every admission queued
// behind it. A dedicated connection (rueidis' pool of them, one per
// command in flight) gives each admission its own, from a client of their
// own (c.confirm, Config.WaitPoolSize): in rdb's pool they waited for a
// connection behind the stream readers' blocking reads, up to the workers'
// Block each, once as many readers as the pool holds were waiting on idle
// streams (TestWaitAdmissionBesideIdleReaders).
//
// A duplicate answer names an order the buyer holds, which may be an
// admission no replica has yet (one answered unavailable below): with
// waiting on, the script writes the buyer's slot again, unchanged, and the
// WAIT after it covers every write before it, that admission's included.
//
// An admission the script made but too few replicas acknowledged is
// answered unavailable, never admitted: a failover now could lose it. It
// stays in Redis; the buyer's retry gets it back as a duplicate with the
// same order id if it survives, or admits afresh if it was lost. A lost
// reply is answered the same way, for the same reason: reading the buyer's
// slot back (the service's settle) would find the write on the master
// without knowing whether a replica has it.
func (c *Client) admitReplicated(ctx context.Context, cmd rueidis.Completed) ([]rueidis.RedisMessage, error) {
	var (
		out      []rueidis.RedisMessage
		scripted error
		waited   error
	)
	err := c.confirm.Dedicated(func(dc rueidis.DedicatedClient) error {
		out, scripted = dc.Do(ctx, cmd).ToArray()
		if scripted != nil || len(out) == 0 {
			return nil
		}
		// An admission, or a duplicate (whose script wrote the slot again):
		// the order the buyer is told of must be on enough replicas.
		if !wrote(out) {
			return nil // nothing written: no replica needs to have it
		}
		// WAIT only after a write: it waits for the connection's last
		// write, and sent after an answer that wrote nothing it was seen
		// to wait its whole timeout all the same.
		waited = c.waitOn(ctx, dc)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if scripted != nil {
		return scriptFailed(scripted)
	}
	if waited != nil {
		return nil, notConfirmed("not on enough replicas", waited)
	}
	return out, nil
}

// notConfirmed is the answer to an admission that may have been made but
// is not known to be on enough replicas: a final ErrUnavailable (an
// *seckill.Error, which the service answers as it is, without reading the
// buyer's slot back). The admission stands on the master unless a failover
// loses it, and a worker persists it: the buyer, answered 503, must look
// at their orders before buying elsewhere (docs/guarantees.md).
func notConfirmed(why string, cause error) error {
	msg := notConfirmedMessage
	e := &seckill.Error{Kind: seckill.ErrUnavailable, Message: msg, RetryAfter: time.Second}
	if cause != nil {
		return fmt.Errorf("redis: admit: %s: %w (%w)", why, e, cause)
	}
	return fmt.Errorf("redis: admit: %s: %w", why, e)
}

// NotConfirmed is notConfirmed for the batches' queues
// (redisledger.GroupCommit): an admission whose caller left before its
// batch was confirmed is answered so.
func NotConfirmed(why string, cause error) error { return notConfirmed(why, cause) }

// notConfirmedMessage tells a buyer whose admission was not confirmed
// that it may have been made: it shows in their orders if it was.
const notConfirmedMessage = "your order may have been taken but is not confirmed yet: check your orders (GET /api/orders) " +
	"before you buy elsewhere; trying again here never buys twice"

// WaitReplicas reports how many replicas must acknowledge an admission
// (Config.WaitReplicas).
func (c *Client) WaitReplicas() int { return c.waitReplicas }

// waitOn sends WAIT for Config.WaitReplicas replicas on dc, which covers
// every write made on it before, and returns nil if enough acknowledged
// within Config.WaitTimeout; else why not (too few, or no reply).
func (c *Client) waitOn(ctx context.Context, dc rueidis.DedicatedClient) error {
	wait := dc.B().Wait().Numreplicas(int64(c.waitReplicas)).Timeout(c.waitTimeout.Milliseconds()).Build()
	acked, err := dc.Do(ctx, wait).AsInt64()
	if err == nil && acked < int64(c.waitReplicas) {
		err = fmt.Errorf("%d of %d replicas acknowledged it within %s", acked, c.waitReplicas, c.waitTimeout)
	}
	return err
}
