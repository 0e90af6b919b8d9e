// Package apptest gives tests a seckill backend, a store and a Redis: this
// machine's services when they answer (always in CI, where one that does
// not fails the test), else the embedded backend, an in-process
// Redis-protocol server and SQLite. So the domain's tests run on a laptop
// with no services, and against the real ones wherever they are.
//
// Tests of what only a real server does (restarts, persistence, script
// flushes) use internal/testenv directly and skip without it.
package apptest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/mysql"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/sqlite"
)

// Store returns a migrated store of the test's own: a fresh database on
// the test MariaDB, or a SQLite file in the test's directory. It is closed
// when the test ends.
func Store(t testing.TB) seckill.Store {
	t.Helper()
	ctx := context.Background()
	var (
		store seckill.Store
		err   error
	)
	if testenv.HasMySQL() {
		store, err = mysql.Open(ctx, testenv.MySQLURL(t), 8)
	} else {
		t.Log("MariaDB does not answer: the test runs on SQLite")
		store, err = sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "seckill.db"), 8)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return store
}

// Redis returns a Redis client of the test's own: on the test Redis under
// a key prefix of the test's (its keys deleted when the test ends), or on
// an embedded server of the test's. URL is where a raw client reaches the
// same server, and Prefix starts the client's keys. The client is closed
// when the test ends.
func Redis(t testing.TB, logger *slog.Logger) (c *redis.Client, url, prefix string) {
	t.Helper()
	var err error
	if testenv.HasRedis() {
		url, prefix = testenv.RedisURL(t), testenv.RedisPrefix(t)
		c, err = redis.Open(context.Background(), redis.Config{URL: url, Prefix: prefix}, logger)
	} else {
		t.Log("Redis does not answer: the test runs on the embedded server")
		prefix = "seckill"
		if c, err = redis.OpenEmbedded(prefix, logger); err == nil {
			url = "redis://" + c.Addr() + "/0"
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, url, prefix
}

// Embedded reports whether tests run on the embedded backend: neither the
// test Redis nor the test MariaDB answers, and not in CI.
func Embedded() bool { return !testenv.HasRedis() && !testenv.HasMySQL() }
