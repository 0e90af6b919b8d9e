package redis

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Group commit of the admissions that wait for replicas.
//
// WAIT covers every write made before it on its connection. So instead of
// a connection, a script and a WAIT per admission (a replica round trip
// each), the admissions bound for one master queue up; a batch takes all
// that are queued (at most a bound), sends their scripts pipelined on a
// dedicated connection, answers at once those that wrote nothing (sold
// out, not started: no replica needs to have them), then sends one WAIT
// and answers the rest by it. The queues and the loops that take batches
// from them are the Batcher's (package redisledger); this file sends one
// batch (SendBatch) and counts what the batches did.

// DefaultWaitBatches is Config.WaitBatches' default.
const DefaultWaitBatches = 4

// batchSlack is how much longer than the WAIT's own timeout a batch may
// take before its admissions are answered unavailable: the scripts'
// round trip, and a master that stopped answering.
const batchSlack = 2 * time.Second

// Batcher runs the admissions that wait for replicas in batches by
// master, each batch confirmed by one WAIT (redisledger.GroupCommit). The
// admission path reaches it through this interface, set at wiring
// (SetBatcher), because the batches run on loops, and this package starts
// none.
type Batcher interface {
	// Admit runs the admission cmd, on the key key, in a batch of its
	// master and returns its answer: the script's reply only once enough
	// replicas have what it wrote (as SendBatch answers it). ErrRunAlone
	// says the admission is to run alone, in the caller.
	Admit(ctx context.Context, key string, cmd rueidis.Completed) ([]rueidis.RedisMessage, error)
}

// ErrRunAlone answers an admission that no batch can take (no topology
// at hand, a master the client does not know, a batcher stopped): its
// caller runs it alone, under its own context, or not at all if it has
// left.
var ErrRunAlone = errors.New("redis: run the admission alone")

// SetBatcher has the admissions that wait for replicas run through b; nil,
// the default, runs each alone.
func (c *Client) SetBatcher(b Batcher) {
	if b == nil {
		c.batcher.Store(nil)
		return
	}
	c.batcher.Store(&b)
}

// WaitBatches is how many batches may be in flight at once per master
// (Config.WaitBatches, or its default).
func (c *Client) WaitBatches() int { return c.waitBatches }

// admitConfirmed runs the admission cmd (on the key key) so that it is
// answered only once enough replicas have what it wrote: in a batch when
// a Batcher is set, else alone.
func (c *Client) admitConfirmed(ctx context.Context, key string, cmd rueidis.Completed) ([]rueidis.RedisMessage, error) {
	if b := c.batcher.Load(); b != nil {
		out, err := (*b).Admit(ctx, key, cmd)
		if !errors.Is(err, ErrRunAlone) {
			return out, err
		}
	}
	return c.admitReplicated(ctx, cmd) // in the caller, under its ctx
}

// Batch is one batch of admissions bound for one master, as a Batcher
// gathered them, for SendBatch.
type Batch interface {
	// Take returns the commands of the admissions whose callers still
	// wait, each now sent (a caller who leaves now is answered as if the
	// reply were lost). SendBatch calls it once it holds the connection,
	// which may have taken a while.
	Take() []rueidis.Completed
	// Answer answers the i-th command Take returned, once.
	Answer(i int, out []rueidis.RedisMessage, err error)
}

// SendBatch sends b's admissions pipelined on a dedicated connection to
// the master at addr ("" outside a Cluster: the one master), answers
// those that wrote nothing, then sends one WAIT and answers the rest by
// it. A master the client does not know (yet: a replica promoted since
// rueidis last read the slots) is ErrRunAlone, before anything is taken:
// each caller runs its own alone, through the cluster client's routing,
// and the topology is read afresh.
func (c *Client) SendBatch(addr string, b Batch) error {
	client := c.confirm
	if addr != "" {
		if client = c.confirm.Nodes()[addr]; client == nil {
			c.ForgetTopology()
			return ErrRunAlone
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.waitTimeout+batchSlack)
	defer cancel()
	type written struct {
		i   int
		out []rueidis.RedisMessage
	}
	var writers []written
	_ = client.Dedicated(func(dc rueidis.DedicatedClient) error {
		// The connection may have taken a while (rueidis dials it without
		// a deadline): what the callers left meanwhile is not sent.
		cmds := b.Take()
		if len(cmds) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			for i := range cmds {
				b.Answer(i, nil, notConfirmed("no connection to the master in time", err))
			}
			return nil
		}
		c.commits.batches.Add(1)
		c.commits.admissions.Add(int64(len(cmds)))
		results := dc.DoMulti(ctx, cmds...)
		// A redirection, or a master that does not answer (killed, failed
		// over): the topology is stale. Forgotten before any answer, so
		// that a buyer's quick retry is not batched for the same master.
		for _, res := range results {
			if err := res.Error(); err != nil && (isRedirect(err) || isNetwork(err)) {
				c.ForgetTopology()
				break
			}
		}
		for i, res := range results {
			out, err := res.ToArray()
			if err != nil {
				out, err := scriptFailed(err)
				b.Answer(i, out, err)
				continue
			}
			if !wrote(out) {
				b.Answer(i, out, nil) // nothing written: no replica needs to have it
				continue
			}
			writers = append(writers, written{i, out})
		}
		if len(writers) == 0 {
			return nil
		}
		err := c.waitOn(ctx, dc)
		c.commits.waits.Add(1)
		if isNetwork(err) {
			c.ForgetTopology()
		}
		if err != nil {
			c.commits.unconfirmed.Add(int64(len(writers)))
		}
		for _, w := range writers {
			if err != nil {
				b.Answer(w.i, nil, notConfirmed("not on enough replicas", err))
			} else {
				b.Answer(w.i, w.out, nil)
			}
		}
		return nil
	})
	return nil
}

// wrote reports whether an admission's reply says its script wrote: an
// admission, or a duplicate (whose script, with waiting on, writes the
// buyer's slot again so that the WAIT after it covers the order it names).
func wrote(out []rueidis.RedisMessage) bool {
	if len(out) == 0 {
		return false
	}
	code, err := out[0].AsInt64()
	return err == nil && (code == admitted || code == admitDuplicate)
}

// scriptFailed is the answer to an admission whose script failed: an
// error answer that says what it is (NOSCRIPT, a script error) as it is;
// a lost reply, or one refused for now (CLUSTERDOWN, TRYAGAIN, READONLY,
// a redirection during a failover), as final and unconfirmed, so that the
// service does not settle it by reading the buyer's slot, whose order no
// replica may have. The retry runs the script again.
func scriptFailed(err error) ([]rueidis.RedisMessage, error) {
	var re *rueidis.RedisError
	if errors.As(err, &re) && (re.IsNoScript() || !retryable(re.Error())) {
		return nil, err
	}
	return nil, notConfirmed("the admission's answer was lost or refused", err)
}

// isRedirect reports a Cluster's answer that the key's slot is served
// elsewhere.
func isRedirect(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return false
	}
	_, moved := re.IsMoved()
	_, ask := re.IsAsk()
	return moved || ask
}

// commitCounts are the counts of GroupCommitStats.
type commitCounts struct {
	batches, admissions, waits, unconfirmed atomic.Int64
}

// GroupCommitStats counts the batches of admissions that wait for
// replicas since the client opened: what the group commit does.
type GroupCommitStats struct {
	// Batches run, and the Admissions they carried: their ratio is the
	// mean batch.
	Batches, Admissions int64
	// Waits is the batches that sent a WAIT (some admission in them wrote),
	// and Unconfirmed the admissions that wrote but were answered
	// unavailable: too few replicas acknowledged in time, or the WAIT's
	// reply was lost.
	Waits, Unconfirmed int64
}

// GroupCommitStats returns the counts of the group commit; all zero when
// admissions do not wait for replicas.
func (c *Client) GroupCommitStats() GroupCommitStats {
	g := &c.commits
	return GroupCommitStats{Batches: g.batches.Load(), Admissions: g.admissions.Load(), Waits: g.waits.Load(), Unconfirmed: g.unconfirmed.Load()}
}
