// Package redis owns all of seckill's Redis I/O: the keys (one builder, hash
// tagged per voucher), the Lua scripts (embedded .lua files run by SHA) and
// the mapping of their results to domain errors.
//
// It works on a Redis server or Cluster, and on an embedded Redis-protocol
// server (miniredis) for trying seckill with no setup.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

// DefaultPrefix starts every key unless Config.Prefix says otherwise.
const DefaultPrefix = "seckill"

// Config configures a Client.
type Config struct {
	// URL of the Redis server: redis://[user:password@]host:port[/db], or
	// rediss:// for TLS. For a Cluster, name more nodes with ?addr=host:port;
	// the client discovers the rest. Required.
	URL string
	// Prefix starts every key, so that several deployments or tests can
	// share one Redis. Default DefaultPrefix.
	Prefix string
	// Embedded says that URL is the embedded server of a running seckill
	// serve, reached by a command line tool: scripts run without their
	// shebang line there and it has no eviction policy to check.
	Embedded bool
	// WaitReplicas is how many replicas must acknowledge an admission's
	// write before it is answered (WAIT on the admission's connection).
	// Default 0: answered once the master has it; a failover to a replica
	// that lacked it then loses it (docs/guarantees.md).
	WaitReplicas int
	// WaitTimeout bounds that wait; an admission not acknowledged in time
	// is answered unavailable (the buyer's retry finds it, or admits
	// afresh). Default DefaultWaitTimeout.
	WaitTimeout time.Duration
	// WaitBatches is how many batches of admissions that wait for
	// replicas may be in flight at once per master, each on a connection
	// of its own: a batch pipelines the scripts of the admissions queued
	// for the master and confirms them all with one WAIT (group commit,
	// groupcommit.go). While they are all out, admissions queue for the
	// next. Used only with WaitReplicas; default DefaultWaitBatches.
	WaitBatches int
	// WaitPoolSize bounds the connections per master of the pool that
	// those batches, and transfers' takes that wait for replicas, hold: a
	// pool of their own, apart from the one that the stream readers'
	// blocking reads share (one per voucher watched, each blocked up to
	// the workers' Block on an idle stream), so that neither waits behind
	// the other. Used only with WaitReplicas; default DefaultWaitPoolSize.
	WaitPoolSize int
	// Vouchers reads a voucher's row, for the tags of its shards
	// (seckill.Voucher.ShardTags) when a method is given the id of a
	// voucher this client has not learnt (Client.Learn). Nil: such a
	// voucher is taken as unsharded.
	Vouchers func(ctx context.Context, id int64) (*seckill.Voucher, error)
}

// DefaultWaitTimeout is Config.WaitTimeout's default.
const DefaultWaitTimeout = 500 * time.Millisecond

// DefaultWaitPoolSize is Config.WaitPoolSize's default, the size of
// rueidis' own pool: far more than the batches (DefaultWaitBatches) and
// the transfers in flight need; the pool closes idle connections.
const DefaultWaitPoolSize = rueidis.DefaultPoolSize

// Client is seckill's connection to Redis. It implements
// [redisledger.Cache], [seckill.LoginCodes] and, for the copies of
// sold-out vouchers' buyers, [soldout.Reader].
type Client struct {
	rdb rueidis.Client
	// confirm runs the admissions that wait for replicas, batched by
	// master (SendBatch, groupcommit.go), each batch on a dedicated
	// connection of its pool (Config.WaitPoolSize): rdb's pool of those is
	// the one its blocking stream reads share. It is rdb when admissions
	// do not wait.
	confirm rueidis.Client
	// batcher takes those admissions into batches (SetBatcher); nil: each
	// runs alone. commits counts what the batches did.
	batcher atomic.Pointer[Batcher]
	commits commitCounts
	keys    keyspace
	// admitLua is the deployment's admission script
	// (admitScript.deployment).
	admitLua loaded
	// transferLua are the deployment's transfer scripts, armed with the
	// admission script and run by SHA alone as it is (runArmed).
	transferLua transferScripts
	logger      *slog.Logger
	// embedded: the server is the embedded one (this client's, or that of
	// a running serve).
	embedded bool
	// server is the embedded server this client runs, if any.
	server *miniredis.Miniredis
	// waitReplicas, waitTimeout and waitBatches: Config.WaitReplicas,
	// WaitTimeout and WaitBatches.
	waitReplicas int
	waitTimeout  time.Duration
	waitBatches  int

	// tls: the connections use TLS (a Cluster names its nodes' TLS ports
	// apart).
	tls bool
	// opt is what Open connected with: CheckReplicas connects to replicas
	// and sentinels with its credentials.
	opt rueidis.ClientOption

	// hot holds the keys of the vouchers being sold (see hotKeys).
	hot hotKeys
	// layouts holds where each voucher's shards are (layout.go), and
	// vouchers reads those not yet there (Config.Vouchers, or
	// SetVouchers): nil, or a non-nil function.
	layouts  layouts
	vouchers atomic.Pointer[voucherReader]
	// lagging holds, by a donor shard's meta key, until when (unix ms) a
	// borrow takes nothing from it: its last take could not be confirmed
	// on its replicas (transfer.go, takeReplicated).
	lagging sync.Map

	// topo is the topology read last, at topoAt; topoGen counts the
	// times it was forgotten.
	topoMu  sync.Mutex
	topoGen uint64
	topo    *Topology
	topoAt  time.Time
}

var _ seckill.LoginCodes = (*Client)(nil)

// Open connects to the Redis of cfg and checks that it will not evict keys:
// an evicted stock or buyer set would oversell. A Redis that will not say its
// eviction policy (CONFIG disabled, as on some managed services) is used with
// a warning.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Client, error) {
	opt, err := rueidis.ParseURL(cfg.URL)
	if err != nil {
		// The parser's message may quote the URL, password and all.
		return nil, fmt.Errorf("redis: parse URL %s: %s", redactURL(cfg.URL), redactPassword(err.Error(), cfg.URL))
	}
	if cfg.Embedded {
		opt.ForceSingleClient = true
	}
	c, err := open(opt, cfg.Prefix, cfg.Embedded, logger)
	if err != nil {
		return nil, err
	}
	if cfg.WaitReplicas < 0 || cfg.WaitPoolSize < 0 || cfg.WaitBatches < 0 {
		c.Close()
		return nil, fmt.Errorf("redis: wait replicas %d, wait pool size %d, wait batches %d: want 0 or more", cfg.WaitReplicas, cfg.WaitPoolSize, cfg.WaitBatches)
	}
	c.waitBatches = cfg.WaitBatches
	if c.waitBatches == 0 {
		c.waitBatches = DefaultWaitBatches
	}
	if cfg.WaitReplicas > 0 && !cfg.Embedded {
		opt.DisableCache, opt.DisableRetry = true, true // as open does
		opt.BlockingPoolSize = cfg.WaitPoolSize
		if opt.BlockingPoolSize == 0 {
			opt.BlockingPoolSize = DefaultWaitPoolSize
		}
		closeIdleBlocking(&opt)
		if c.confirm, err = rueidis.NewClient(opt); err != nil {
			c.Close()
			return nil, fmt.Errorf("redis: connect to %s for admissions that wait for replicas: %w", strings.Join(opt.InitAddress, ","), err)
		}
	}
	c.opt = opt
	c.SetVouchers(cfg.Vouchers)
	c.waitReplicas, c.waitTimeout = cfg.WaitReplicas, cfg.WaitTimeout
	if c.waitTimeout <= 0 {
		c.waitTimeout = DefaultWaitTimeout
	}
	// WAIT takes whole milliseconds, and WAIT n 0 waits for ever.
	c.waitTimeout = max(c.waitTimeout, time.Millisecond)
	if cfg.Embedded {
		if err := c.Ping(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	if err := c.checkEviction(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if c.waitReplicas > 0 && c.confirm.Mode() == rueidis.ClientModeCluster {
		// The batches of a Cluster's admissions are routed by the topology
		// at hand (HeldTopology): read it now, or the first ones run alone.
		if t, err := c.topology(ctx, true); err == nil {
			c.setTopology(&t, 0)
		}
	}
	return c, nil
}

// OpenEmbedded starts an in-process Redis-protocol server on a loopback port
// and connects to it. It keeps its data in memory only: for trying seckill,
// not for production. Close stops the server.
func OpenEmbedded(prefix string, logger *slog.Logger) (*Client, error) {
	server := miniredis.NewMiniRedis()
	if err := server.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("redis: start embedded server: %w", err)
	}
	c, err := open(rueidis.ClientOption{InitAddress: []string{server.Addr()}, ForceSingleClient: true}, prefix, true, logger)
	if err != nil {
		server.Close()
		return nil, err
	}
	c.server = server
	return c, nil
}

func open(opt rueidis.ClientOption, prefix string, embedded bool, logger *slog.Logger) (*Client, error) {
	// Client-side caching is of no use to us and the embedded server lacks it.
	// rueidis never retries a write on its own, which the admission script
	// needs (docs/design/redis.md, Rules); with DisableRetry it does not retry reads
	// either, so a Redis that is down is an error at once, not a wait.
	opt.DisableCache = true
	opt.DisableRetry = true
	closeIdleBlocking(&opt)
	rdb, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis: connect to %s: %w", strings.Join(opt.InitAddress, ","), err)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	admit := admitScript.deployment(prefix, embedded)
	return &Client{rdb: rdb, confirm: rdb, keys: keyspace{prefix: prefix}, admitLua: admit,
		transferLua: transferScripts{
			take:   transferTakeScript.deployment(prefix, embedded),
			give:   transferGiveScript.deployment(prefix, embedded),
			settle: transferSettleScript.deployment(prefix, embedded),
		},
		logger: logger, embedded: embedded, tls: opt.TLSConfig != nil}, nil
}

// closeIdleBlocking has the pool of dedicated connections (stream reads
// that block, admissions that wait for replicas) close the connections
// idle for blockingIdle, down to blockingMin: rueidis keeps them open
// otherwise, and after one burst of a sale each instance held hundreds of
// connections for good (556 after 600 admissions at once), nearing Redis's
// maxclients with a few instances (found by review).
func closeIdleBlocking(opt *rueidis.ClientOption) {
	opt.BlockingPoolCleanup = blockingIdle
	opt.BlockingPoolMinSize = blockingMin
}

// blockingIdle and blockingMin: see closeIdleBlocking. A variable for
// the tests.
var blockingIdle = time.Minute

const blockingMin = 8

// redactURL hides the password of a Redis URL for messages and logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

// redactPassword replaces, in msg, the password that the URL raw carries.
// A URL too broken to parse is cut at its last '@' instead: what comes
// before it may be a password.
func redactPassword(msg, raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			return strings.ReplaceAll(msg, p, "xxxxx")
		}
		return msg
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return strings.ReplaceAll(msg, raw[:i], "(redacted)")
	}
	return msg
}

// Addr returns the address of the embedded server, or "" for a Client of a
// real Redis.
func (c *Client) Addr() string {
	if c.server == nil {
		return ""
	}
	return c.server.Addr()
}

// Close closes the connections and stops the embedded server, if any.
func (c *Client) Close() {
	if c.confirm != c.rdb {
		c.confirm.Close()
	}
	c.rdb.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// Ping checks that Redis answers.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.rdb.Do(ctx, c.rdb.B().Ping().Build()).Error(); err != nil {
		return redisErr("ping", err)
	}
	return nil
}

// checkEviction checks every master: on a Cluster a command without a key
// goes to one node, and any master that evicts would oversell its vouchers.
func (c *Client) checkEviction(ctx context.Context) error {
	masters, err := c.masterNodes(ctx)
	if err != nil {
		return err
	}
	for addr, node := range masters {
		m, err := node.Do(ctx, node.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
		if err != nil {
			if isNetwork(err) {
				return redisErr("read maxmemory-policy of "+addr, err)
			}
			c.logger.Warn("cannot read Redis maxmemory-policy; make sure it is noeviction, or a full Redis will drop stock and buyers", "node", addr, "err", err)
			continue
		}
		if policy := m["maxmemory-policy"]; policy != "noeviction" {
			return fmt.Errorf("redis: maxmemory-policy of %s is %q: evicting keys would oversell; set it to noeviction "+
				"(CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf)", addr, policy)
		}
	}
	return nil
}

// redisErr wraps a failed call. A failure to talk to Redis, or an answer
// that says to wait (out of memory, busy, loading, a failover), is
// ErrUnavailable: trying again may work. Any other error answer (a wrong
// type, a script error) would only fail again, and is not.
func redisErr(op string, err error) error {
	var re *rueidis.RedisError
	if errors.As(err, &re) && !retryable(re.Error()) {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	return fmt.Errorf("redis: %s: %w: %w", op, seckill.ErrUnavailable, err)
}

// retryable reports an error answer that a later try may not get.
func retryable(msg string) bool {
	for _, prefix := range []string{"OOM", "BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "NOREPLICAS", "MISCONF",
		// A slot moving during a reshard, or a redirection the client did
		// not follow: the command did not run there.
		"MOVED", "ASK", "UNBLOCKED"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// isNetwork reports whether err is a failure to talk to Redis rather than
// an error reply from it.
func isNetwork(err error) bool {
	var re *rueidis.RedisError
	return err != nil && !errors.As(err, &re)
}
