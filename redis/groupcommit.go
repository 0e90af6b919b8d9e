package redis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Group commit of the admissions that wait for replicas.
//
// WAIT covers every write made before it on its connection. So instead of
// a connection, a script and a WAIT per admission (a replica round trip
// each), the admissions bound for one master queue up; a batch takes all
// that are queued (at most maxBatch), sends their scripts pipelined on a
// dedicated connection, answers at once those that wrote nothing (sold
// out, not started: no replica needs to have them), then sends one WAIT
// and answers the rest by it. A master has at most Config.WaitBatches
// batches in flight, each on a connection of its own: while they are all
// out, new admissions queue, and the next batch takes them all. Under a
// light load a batch is one admission, as before; under a heavy one a
// WAIT confirms hundreds.

// DefaultWaitBatches is Config.WaitBatches' default.
const DefaultWaitBatches = 4

// maxBatch bounds the admissions one batch pipelines: a batch's scripts
// run back to back on the master, and the admissions queued behind a full
// batch go in the next.
const maxBatch = 512

// batchSlack is how much longer than the WAIT's own timeout a batch may
// take before its admissions are answered unavailable: the scripts'
// round trip, and a master that stopped answering.
const batchSlack = 2 * time.Second

// groupCommit queues the admissions that wait for replicas, by master.
type groupCommit struct {
	lanes int

	// The counts of GroupCommitStats.
	batches, admissions, waits, unconfirmed atomic.Int64

	mu      sync.Mutex
	masters map[string]*commitQueue
}

// commitQueue is one master's queue: admissions waiting for a batch, and
// how many batches are in flight.
type commitQueue struct {
	addr string // "" outside a Cluster: the one master

	mu       sync.Mutex
	waiting  []*pendingAdmission
	inflight int
}

// pendingAdmission is one admission in a queue, and its answer once its
// batch gives it (done closed).
type pendingAdmission struct {
	cmd rueidis.Completed
	// Guarded by the queue's mu: a batch sent it on a connection it holds
	// (sent); or its caller left before it was sent (abandoned: skipped,
	// never run, never answered).
	sent, abandoned bool

	done chan struct{}
	out  []rueidis.RedisMessage
	err  error
}

func (p *pendingAdmission) answer(out []rueidis.RedisMessage, err error) {
	p.out, p.err = out, err
	close(p.done)
}

// queue returns the queue of the master at addr.
func (g *groupCommit) queue(addr string) *commitQueue {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.masters == nil {
		g.masters = make(map[string]*commitQueue)
	}
	q := g.masters[addr]
	if q == nil {
		q = &commitQueue{addr: addr}
		g.masters[addr] = q
	}
	return q
}

// admitGrouped runs the admission cmd (on the key key) in a batch of its
// master and returns its answer as admitReplicated does: the script's
// reply only once enough replicas have what it wrote.
func (c *Client) admitGrouped(ctx context.Context, key string, cmd rueidis.Completed) ([]rueidis.RedisMessage, error) {
	addr := ""
	if c.confirm.Mode() == rueidis.ClientModeCluster {
		// The batch runs on the master's own connections: rueidis' cluster
		// client keeps a dedicated connection to one slot, and a batch
		// holds the admissions of every voucher of the master. Which
		// master comes from the topology at hand, never a read of it.
		if addr = c.batchMaster(key); addr == "" {
			return c.admitReplicated(ctx, cmd) // no topology yet: alone, as rueidis routes it
		}
	}
	p := &pendingAdmission{cmd: cmd, done: make(chan struct{})}
	q := c.commits.queue(addr)
	q.mu.Lock()
	q.waiting = append(q.waiting, p)
	lead := q.inflight < max(c.commits.lanes, 1)
	if lead {
		q.inflight++
	}
	q.mu.Unlock()
	if lead {
		go c.runBatches(q)
	}
	select {
	case <-p.done:
		if errors.Is(p.err, errRunAlone) {
			return c.admitReplicated(ctx, cmd) // in the caller, under its ctx
		}
		return p.out, p.err
	case <-ctx.Done():
		q.mu.Lock()
		p.abandoned = !p.sent
		q.mu.Unlock()
		// Taken or not, answered as one whose reply was lost: the service
		// must not settle it by reading the buyer's slot, whose order (an
		// earlier unconfirmed one, or this one if it ran) no replica may
		// have.
		return nil, notConfirmed("the request ended before its batch was confirmed", ctx.Err())
	}
}

// runBatches runs batches of q until it is empty: one of the master's
// lanes.
func (c *Client) runBatches(q *commitQueue) {
	for {
		q.mu.Lock()
		batch := make([]*pendingAdmission, 0, min(len(q.waiting), maxBatch))
		n := 0
		for _, p := range q.waiting {
			if len(batch) == maxBatch {
				break
			}
			n++
			if !p.abandoned {
				batch = append(batch, p)
			}
		}
		q.waiting = q.waiting[n:]
		if len(q.waiting) == 0 {
			q.waiting = nil // let the backing array go
		}
		if len(batch) == 0 {
			q.inflight--
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		c.runBatch(q, batch)
	}
}

// errRunAlone answers the admissions of a batch that cannot run as one
// (runBatch): each caller runs its own alone, under its own context, or
// not at all if it has left.
var errRunAlone = errors.New("redis: run the admission alone")

// runBatch sends batch's scripts pipelined on a dedicated connection to
// q's master, answers those that wrote nothing, then WAITs once for the
// rest.
func (c *Client) runBatch(q *commitQueue, batch []*pendingAdmission) {
	client := c.confirm
	if q.addr != "" {
		if client = c.confirm.Nodes()[q.addr]; client == nil {
			// A master rueidis does not know (yet; a replica promoted since
			// it last read the slots): each caller runs its own alone,
			// through the cluster client's routing, and the topology is
			// read afresh.
			c.forgetTopology()
			for _, p := range batch {
				p.answer(nil, errRunAlone)
			}
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.waitTimeout+batchSlack)
	defer cancel()
	type written struct {
		p   *pendingAdmission
		out []rueidis.RedisMessage
	}
	var (
		writers []written
		cmds    rueidis.Commands
	)
	_ = client.Dedicated(func(dc rueidis.DedicatedClient) error {
		// The connection may have taken a while (rueidis dials it without
		// a deadline): what the callers left meanwhile is not sent.
		batch, cmds = sendable(q, batch)
		if len(batch) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			for _, p := range batch {
				p.answer(nil, notConfirmed("no connection to the master in time", err))
			}
			return nil
		}
		c.commits.batches.Add(1)
		c.commits.admissions.Add(int64(len(batch)))
		results := dc.DoMulti(ctx, cmds...)
		// A redirection, or a master that does not answer (killed, failed
		// over): the topology is stale. Forgotten before any answer, so
		// that a buyer's quick retry is not batched for the same master.
		for _, res := range results {
			if err := res.Error(); err != nil && (isRedirect(err) || isNetwork(err)) {
				c.forgetTopology()
				break
			}
		}
		for i, res := range results {
			p := batch[i]
			out, err := res.ToArray()
			if err != nil {
				p.answer(scriptFailed(err))
				continue
			}
			if !wrote(out) {
				p.answer(out, nil) // nothing written: no replica needs to have it
				continue
			}
			writers = append(writers, written{p, out})
		}
		if len(writers) == 0 {
			return nil
		}
		err := c.waitOn(ctx, dc)
		c.commits.waits.Add(1)
		if isNetwork(err) {
			c.forgetTopology()
		}
		if err != nil {
			c.commits.unconfirmed.Add(int64(len(writers)))
		}
		for _, w := range writers {
			if err != nil {
				w.p.answer(nil, notConfirmed("not on enough replicas", err))
			} else {
				w.p.answer(w.out, nil)
			}
		}
		return nil
	})
}

// sendable returns the admissions of batch whose callers are still
// waiting, marked sent (a caller who leaves now is answered as if the
// reply were lost), and their commands.
func sendable(q *commitQueue, batch []*pendingAdmission) ([]*pendingAdmission, rueidis.Commands) {
	q.mu.Lock()
	defer q.mu.Unlock()
	live := batch[:0]
	for _, p := range batch {
		if !p.abandoned {
			p.sent = true
			live = append(live, p)
		}
	}
	cmds := make(rueidis.Commands, len(live))
	for i, p := range live {
		cmds[i] = p.cmd
	}
	return live, cmds
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
