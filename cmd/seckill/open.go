package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	drvmysql "github.com/go-sql-driver/mysql"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/app"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/postgres"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/sqlite"
)

// embeddedDBFile is the SQLite file of the embedded default, in DataDir.
const embeddedDBFile = "seckill.db"

// secretFile keeps the embedded default's generated JWT secret, in DataDir,
// so that printed tokens outlive a restart.
const secretFile = "jwt-secret"

// openStore opens the database of c.DBURL, or the embedded default's SQLite
// file when c.DBURL is empty.
func openStore(ctx context.Context, c *Config, logger *slog.Logger) (seckill.Store, error) {
	raw := c.DBURL
	if raw == "" {
		if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("create data directory: %w", err)
		}
		raw = "sqlite://" + filepath.Join(c.DataDir, embeddedDBFile)
	}
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, fmt.Errorf("database URL %q: want mysql://, postgres:// or sqlite://", redact(raw))
	}
	var (
		store seckill.Store
		err   error
	)
	switch scheme {
	case "mysql":
		// The driver logs to the standard error on its own; send that to
		// our log instead (see driverLog).
		driverLog.Store(logger)
		store, err = mysql.Open(ctx, raw, c.DBMaxConns)
	case "postgres", "postgresql":
		store, err = postgres.Open(ctx, raw, c.DBMaxConns)
	case "sqlite":
		store, err = sqlite.Open(ctx, raw, c.DBMaxConns)
	default:
		return nil, fmt.Errorf("database URL %q: unknown scheme %q; want mysql, postgres or sqlite", redact(raw), scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", redact(raw), err)
	}
	return store, nil
}

// embeddedAddrFile holds, in DataDir, the address of the embedded Redis of
// a running serve, for the command line tools to reach it.
const embeddedAddrFile = "redis-addr"

// openRedis connects to c.RedisURL, or starts the embedded server and
// writes its address in DataDir.
func openRedis(ctx context.Context, c *Config, embedded bool, logger *slog.Logger) (*redis.Client, error) {
	if !embedded {
		return redis.Open(ctx, c.redisConfig(), logger)
	}
	cache, err := redis.OpenEmbedded(c.RedisPrefix, logger)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(c.DataDir, embeddedAddrFile), []byte(cache.Addr()+"\n"), 0o600); err != nil {
		cache.Close()
		return nil, fmt.Errorf("record the embedded Redis address: %w", err)
	}
	return cache, nil
}

// tool is what a command line tool that reads a sale opens: the database,
// Redis, and the services that operate on them (built by internal/app, as
// serve's are), in the mode of c (default stream).
type tool struct {
	logger *slog.Logger
	store  seckill.Store
	cache  *redis.Client
	*app.Ops
}

// openTool opens the database and Redis of c for a command line tool,
// logging to stderr. The caller closes the tool.
func openTool(ctx context.Context, c *Config, stderr io.Writer) (*tool, error) {
	embedded, err := c.embedded()
	if err != nil {
		return nil, err
	}
	logger, err := c.newLogger(stderr, embedded)
	if err != nil {
		return nil, err
	}
	store, err := openStore(ctx, c, logger)
	if err != nil {
		return nil, err
	}
	cache, err := dialRedis(ctx, c, embedded, logger)
	if err != nil {
		store.Close()
		return nil, err
	}
	mode := seckill.Mode(c.Mode)
	if mode == "" {
		mode = seckill.ModeStream
	}
	return &tool{logger: logger, store: store, cache: cache, Ops: app.NewOps(mode, c.Retention, store, cache, logger.With("via", "cli"))}, nil
}

// close closes what openTool opened.
func (t *tool) close() {
	t.cache.Close()
	t.store.Close()
}

// dialRedis connects a command line tool to c.RedisURL, or, on the
// embedded default, to the embedded Redis of the seckill serve running on
// DataDir.
func dialRedis(ctx context.Context, c *Config, embedded bool, logger *slog.Logger) (*redis.Client, error) {
	if !embedded {
		return redis.Open(ctx, c.redisConfig(), logger)
	}
	b, err := os.ReadFile(filepath.Join(c.DataDir, embeddedAddrFile))
	if err != nil {
		return nil, fmt.Errorf("no seckill serve is running on the embedded default in %s (its Redis lives inside it): %w", c.DataDir, err)
	}
	cache, err := redis.Open(ctx, redis.Config{URL: "redis://" + strings.TrimSpace(string(b)), Prefix: c.RedisPrefix, Embedded: true}, logger)
	if err != nil {
		return nil, fmt.Errorf("reach the embedded Redis of the seckill serve running on %s: %w", c.DataDir, err)
	}
	return cache, nil
}

// jwtSecret returns the signing secret: c.JWTSecret if set; else, on the
// embedded default only, the one kept in DataDir, made on first use.
func jwtSecret(c *Config, embedded bool) ([]byte, error) {
	if c.JWTSecret != "" {
		if len(c.JWTSecret) < auth.MinSecretLen {
			return nil, fmt.Errorf("SECKILL_JWT_SECRET is %d bytes; it must be at least %d (try: openssl rand -hex 32)", len(c.JWTSecret), auth.MinSecretLen)
		}
		return []byte(c.JWTSecret), nil
	}
	if !embedded {
		return nil, fmt.Errorf("SECKILL_JWT_SECRET is required with real services: at least %d bytes (try: openssl rand -hex 32)", auth.MinSecretLen)
	}
	path := filepath.Join(c.DataDir, secretFile)
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) >= auth.MinSecretLen {
		return []byte(strings.TrimSpace(string(b))), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read JWT secret: %w", err)
	}
	var random [32]byte
	rand.Read(random[:])
	secret := hex.EncodeToString(random[:])
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("save JWT secret: %w", err)
	}
	return []byte(secret), nil
}

// driverLog is the log the MySQL driver's own messages go to: the latest
// store's. The driver's logger is a global that each of its configurations
// reads as it is made, so it is set once, before anything runs (init), and
// only the log it writes to changes: set per store, it raced with a
// configuration made at the same time (two stores opened at once in one
// process, as the tests do).
var driverLog atomic.Pointer[slog.Logger]

func init() { drvmysql.SetLogger(mysqlLogger{}) }

// mysqlLogger is the MySQL driver's logger, writing to driverLog.
type mysqlLogger struct{}

func (mysqlLogger) Print(v ...any) {
	if l := driverLog.Load(); l != nil {
		l.Warn("mysql driver: " + fmt.Sprint(v...))
	}
}

// redact hides the password of a URL for messages and logs.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

// redisConfig is the configuration of the Redis client of c.
func (c *Config) redisConfig() redis.Config {
	return redis.Config{URL: c.RedisURL, Prefix: c.RedisPrefix, WaitReplicas: c.RedisWaitReplicas, WaitTimeout: c.RedisWaitTimeout,
		WaitBatches: c.RedisWaitBatches, WaitPoolSize: c.RedisWaitPool}
}
