package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/monitor"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/worker"
)

// Config is every setting of seckill. Each is a flag and an environment
// variable (see envName); the defaults are those registered in the flag
// functions below and listed in docs/configuration.md.
type Config struct {
	Addr               string        // HTTP listen address
	Mode               string        // order pipeline: stream
	RedisURL           string        // empty with DBURL empty: embedded default
	RedisPrefix        string        // starts every Redis key
	RedisWaitReplicas  int           // replicas that must have an admission before it is answered
	SoldOutCopy        bool          // answer sold-out vouchers' buyers from a copy (app.Config.NoSoldOutCopy)
	RedisWaitTimeout   time.Duration // how long an admission waits for them
	RedisWaitBatches   int           // batches of admissions that wait for replicas in flight per master
	RedisWaitPool      int           // connections per master for admissions that wait for replicas
	DBURL              string        // mysql://, postgres://, sqlite://
	DBMaxConns         int           // database connection pool size
	DataDir            string        // the embedded default's files
	JWTSecret          string        // HS256 secret, at least 32 bytes
	TokenTTL           time.Duration // lifetime of login and printed admin tokens
	Migrate            bool          // apply migrations at serve start
	ShutdownTimeout    time.Duration // grace for requests in flight at shutdown
	ReadHeaderTimeout  time.Duration
	ReadTimeout        time.Duration
	WriteTimeout       time.Duration
	IdleTimeout        time.Duration
	LogLevel           string        // debug, info, warn, error
	LogFormat          string        // auto, text, json
	Consumer           string        // this instance's consumer name
	Workers            int           // batches persisted at once
	BatchSize          int           // orders per read and per transaction
	ClaimLease         time.Duration // idle time before a message is reclaimed
	MaxDeliveries      int64         // deliveries before the dead letters
	QueueCapacity      int           // the queue mode's queue size
	RateUser           float64       // buy requests a second per buyer
	RateUserBurst      int
	RateAddr           float64 // buy requests a second per client address
	RateAddrBurst      int
	OrderRateUser      float64 // order reads a second per buyer
	OrderRateUserBurst int
	OrderRateAddr      float64 // order reads a second per client address
	OrderRateAddrBurst int
	TrustedProxies     string        // proxies whose X-Forwarded-For is believed
	BacklogHigh        int64         // stream backlog that stops admission
	BacklogLow         int64         // stream backlog that resumes it
	WorkersMax         int           // the most batches persisted at once
	Retention          time.Duration // how long an ended voucher is kept
	MetricsAddr        string        // a listener of /metrics's own
	MetricsToken       string        // the bearer token /metrics requires
	MetricsCache       time.Duration // how long a read of the gauges serves scrapes

	PaymentProvider      string        // fake or webhook
	PaymentURL           string        // the webhook provider's API
	PaymentAPIKey        string        // its bearer token
	PaymentWebhookSecret string        // HMAC-SHA256 key of its signatures
	SweepEvery           time.Duration // how often unpaid orders past their deadline are cancelled
	PaymentGrace         time.Duration // how long a payment started before payBy is waited for after it
	Currency             string        // ISO 4217 code of vouchers created without one

	LoginWebhookURL      string        // where login codes are posted
	LoginWebhookSecret   string        // HMAC-SHA256 key of the webhook's signature
	LoginWebhookTimeout  time.Duration // bound on one webhook request
	LoginCountryCode     string        // country of phone numbers written without one
	LoginRateAddr        float64       // login requests a second per client address
	LoginRateAddrBurst   int
	LoginRateGlobal      float64 // login requests a second from all clients
	LoginRateGlobalBurst int
	LoginWrongAddr       int64 // wrong login codes an hour per client address
	LoginWrongGlobal     int64 // wrong login codes an hour from all clients, all instances

	ChallengeTTL       time.Duration // how long a challenge stays valid after the start
	ChallengeMinNumber int64         // maxnumber of challenges at rest
	ChallengeMaxNumber int64         // maxnumber under load, at most
	ChallengeRate      float64       // distinct buyers a second per voucher above which the difficulty rises

	ChallengeRateUser      float64 // challenge requests a second per buyer
	ChallengeRateUserBurst int
}

func (c *Config) challengeFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.ChallengeTTL, "challenge-ttl", seckill.DefaultChallengeTTL, "how long a voucher's challenge stays valid after the later of its issue and the sale's start")
	fs.Int64Var(&c.ChallengeMinNumber, "challenge-min-number", seckill.DefaultChallengeMinNumber, "maxnumber of the challenges at rest: a buyer tries half as many hashes on average")
	fs.Int64Var(&c.ChallengeMaxNumber, "challenge-max-number", seckill.DefaultChallengeMaxNumber, fmt.Sprintf("maxnumber of the challenges under load, at most (at most %d): about a second's work for a phone", seckill.MaxChallengeNumber))
	fs.Float64Var(&c.ChallengeRate, "challenge-rate", seckill.DefaultChallengeRate, "distinct buyers a second asking here for a voucher's challenges or presenting its solutions, above which its difficulty doubles each second (one buyer counts once however often they ask; negative: only the backlog raises it)")
}

func (c *Config) limitFlags(fs *flag.FlagSet) {
	fs.Float64Var(&c.RateUser, "rate-user", 5, "buy requests a second each buyer may make (0: no limit)")
	fs.IntVar(&c.RateUserBurst, "rate-user-burst", 10, "buy requests a buyer may make at once above --rate-user")
	fs.Float64Var(&c.RateAddr, "rate-addr", 0, "buy requests a second each client address may make (0: no limit; many buyers share an address behind mobile NAT)")
	fs.IntVar(&c.RateAddrBurst, "rate-addr-burst", 100, "buy requests an address may make at once above --rate-addr")
	fs.Float64Var(&c.OrderRateUser, "order-rate-user", 5, "order reads (GET /api/orders, /api/orders/{id}) a second each buyer may make, apart from its buys (0: no limit)")
	fs.IntVar(&c.OrderRateUserBurst, "order-rate-user-burst", 20, "order reads a buyer may make at once above --order-rate-user")
	fs.Float64Var(&c.OrderRateAddr, "order-rate-addr", 0, "order reads a second each client address may make (0: no limit; many buyers share an address behind mobile NAT)")
	fs.IntVar(&c.OrderRateAddrBurst, "order-rate-addr-burst", 100, "order reads an address may make at once above --order-rate-addr")
	fs.Float64Var(&c.ChallengeRateUser, "challenge-rate-user", 5, "challenge requests (GET /api/vouchers/{id}/challenge) a second each buyer may make, apart from its buys (0: no limit)")
	fs.IntVar(&c.ChallengeRateUserBurst, "challenge-rate-user-burst", 10, "challenge requests a buyer may make at once above --challenge-rate-user")
	fs.StringVar(&c.TrustedProxies, "trusted-proxies", "", "comma-separated addresses or CIDRs of proxies whose X-Forwarded-For names the client (empty: use the connection's address)")
	fs.Int64Var(&c.BacklogHigh, "backlog-high", 1_000_000, "orders waiting in a voucher's stream at which admission answers 503 until the backlog falls to --backlog-low (size it by Redis memory: a waiting order takes about 60 bytes of stream, a buyer about 80 bytes for the whole sale)")
	fs.Int64Var(&c.BacklogLow, "backlog-low", 500_000, "orders waiting in a voucher's stream at which admission resumes after --backlog-high")
}

func (c *Config) workerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Consumer, "consumer", "", "this instance's consumer name in the order streams' group; must be unique among running instances (default host-pid-random)")
	fs.IntVar(&c.Workers, "workers", 4, "order batches persisted at once while the backlog is small")
	fs.IntVar(&c.WorkersMax, "workers-max", 16, "order batches persisted at once, at most, when the backlog grows")
	fs.IntVar(&c.BatchSize, "batch-size", worker.DefaultBatchSize, "orders per stream read and per database transaction")
	fs.DurationVar(&c.ClaimLease, "claim-lease", 30*time.Second, "how long an order message may sit unacknowledged with a consumer before another takes it over")
	fs.Int64Var(&c.MaxDeliveries, "max-deliveries", 5, "deliveries of an order message before it goes to the dead letters")
	c.retentionFlag(fs)
}

func (c *Config) retentionFlag(fs *flag.FlagSet) {
	fs.DurationVar(&c.Retention, "retention", seckill.DefaultRetention, "how long after its sale ends a voucher is kept: its orders still read and shown as pending, its keys kept in Redis (then deleted once its stream is drained); a late buy is answered ended")
}

// saleFlags are the flags a command line tool shares with the serve whose
// sale it reads, and must be given the same values (as SECKILL_MODE and
// SECKILL_RETENTION give them to both): the mode says how a voucher is
// rebuilt (the queue mode's keeps its buyers), the retention which
// vouchers are kept. A tool that took the defaults instead rebuilt a
// voucher serve had retired, or missed one it still kept.
func (c *Config) saleFlags(fs *flag.FlagSet, modeUsage string) {
	fs.StringVar(&c.Mode, "mode", "stream", modeUsage)
	c.retentionFlag(fs)
}

func (c *Config) httpFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", ":8080", "HTTP listen address")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "on SIGINT/SIGTERM, how long requests in flight may take to finish")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", 5*time.Second, "time allowed to read a request's headers")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", 10*time.Second, "time allowed to read a whole request")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", 15*time.Second, "time allowed to handle a request and write the answer")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", 60*time.Second, "close keep-alive connections idle this long")
}

func (c *Config) metricsFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "serve /metrics on this address alone (a private interface or port) and not on --addr (empty: on --addr)")
	fs.StringVar(&c.MetricsToken, "metrics-token", "", "bearer token /metrics requires, wherever it is served (empty: none)")
	fs.DurationVar(&c.MetricsCache, "metrics-cache", monitor.DefaultMetricsCacheFor, "how long one read of the sale's gauges in Redis and the database serves every scrape of /metrics (negative: each scrape reads)")
}

func (c *Config) redisFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL: redis://[user:pass@]host:port[/db], rediss:// for TLS; a Cluster: redis://host1:port?addr=host2:port&addr=host3:port; Sentinel: redis://sentinel1:26379?addr=sentinel2:26379&master_set=NAME (empty, with --db-url empty: the embedded default)")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", redis.DefaultPrefix, "prefix of every Redis key")
	fs.IntVar(&c.RedisWaitReplicas, "redis-wait-replicas", 0, "replicas that must acknowledge an admission (Redis WAIT) before it is answered 200; fewer within --redis-wait-timeout answer 503 (0: answer once the master has it, and a failover to a lagging replica may lose it)")
	fs.DurationVar(&c.RedisWaitTimeout, "redis-wait-timeout", redis.DefaultWaitTimeout, "how long an admission waits for --redis-wait-replicas")
	fs.IntVar(&c.RedisWaitBatches, "redis-wait-batches", redis.DefaultWaitBatches, "with --redis-wait-replicas, batches of admissions in flight per master, each on a connection of its own: a batch pipelines the admissions queued for the master and confirms them all with one WAIT; while every batch is out, admissions queue for the next")
	fs.IntVar(&c.RedisWaitPool, "redis-wait-pool", redis.DefaultWaitPoolSize, "connections per master that the batches of --redis-wait-batches and transfers waiting for --redis-wait-replicas may hold at once, apart from those of the stream readers' blocking reads")
	fs.BoolVar(&c.SoldOutCopy, "sold-out-copy", true, "answer the buyers of a sold-out voucher from this instance's copy of its buyers, not one Redis read each; turn off while instances of a version before it still run")
}

func (c *Config) dbFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DBURL, "db-url", "", "database URL: mysql://user:pass@host:port/db, postgres://user:pass@host:port/db, sqlite:///abs/path.db or sqlite://rel/path.db (empty, with --redis-url empty: the embedded default)")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", 20, "database connection pool size")
	fs.StringVar(&c.DataDir, "data-dir", "seckill-data", "directory of the embedded default's SQLite file and generated JWT secret")
}

func (c *Config) secretFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.JWTSecret, "jwt-secret", "", "HS256 secret for tokens, at least 32 bytes (required with real services; the embedded default generates one in --data-dir)")
}

func (c *Config) logFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "auto", "log format: text, json, or auto (text on the embedded default, json otherwise)")
}

// embedded reports whether to run on the embedded default: neither a Redis
// nor a database URL. One without the other is a mistake, not a mix.
func (c *Config) embedded() (bool, error) {
	switch {
	case c.RedisURL == "" && c.DBURL == "":
		return true, nil
	case c.RedisURL == "":
		return false, errors.New("SECKILL_DB_URL is set but SECKILL_REDIS_URL is not: set both to run on real services, or neither to run on the embedded default")
	case c.DBURL == "":
		return false, errors.New("SECKILL_REDIS_URL is set but SECKILL_DB_URL is not: set both to run on real services, or neither to run on the embedded default")
	}
	return false, nil
}

// newLogger returns the process's logger, writing to w.
func (c *Config) newLogger(w io.Writer, embedded bool) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	format := strings.ToLower(c.LogFormat)
	if format == "auto" {
		format = "json"
		if embedded {
			format = "text"
		}
	}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want auto, text or json", c.LogFormat)
}
