// Package testenv gives each test the real services of this machine,
// isolated: a fresh MariaDB database, a fresh PostgreSQL schema, a Redis key
// prefix of its own; and what tests share: a logger to the test's log, a
// raw Redis client, the voucher keys, WaitFor, the goroutines goleak
// ignores.
//
// A service that does not answer fails the test when the CI environment
// variable is set, and skips it otherwise, saying which service and how to
// start it. Faults (Redis processes, Cluster, Sentinel, partitions, a
// proxy, a full disk, read-only sessions) are package faults'.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/rueidis"
)

// Default service addresses; the SECKILL_TEST_* variables override them.
const (
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
	DefaultMySQLURL    = "mysql://root@127.0.0.1:3306/test"
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// RedisURL returns the URL of the test Redis (SECKILL_TEST_REDIS_URL), after
// checking that it answers.
func RedisURL(t testing.TB) string {
	t.Helper()
	u := env("SECKILL_TEST_REDIS_URL", DefaultRedisURL)
	require(t, "Redis", u, "redis-server --daemonize yes --port 6379 --save '' --appendonly no")
	return u
}

// RedisPrefix returns a key prefix unique to the test, and deletes every key
// under it when the test ends.
func RedisPrefix(t testing.TB) string {
	t.Helper()
	prefix := "t" + Random()
	u := RedisURL(t)
	t.Cleanup(func() {
		opt, err := rueidis.ParseURL(u)
		if err != nil {
			t.Errorf("parse %s: %v", u, err)
			return
		}
		opt.DisableCache = true
		c, err := rueidis.NewClient(opt)
		if err != nil {
			t.Errorf("connect to Redis to clean up: %v", err)
			return
		}
		defer c.Close()
		ctx := context.Background()
		for _, node := range c.Nodes() {
			var cursor uint64
			for {
				e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
				if err != nil {
					t.Errorf("scan keys of %s: %v", prefix, err)
					break
				}
				for _, k := range e.Elements {
					node.Do(ctx, node.B().Del().Key(k).Build())
				}
				if cursor = e.Cursor; cursor == 0 {
					break
				}
			}
		}
	})
	return prefix
}

// MySQLURL creates a database for the test on the test MariaDB
// (SECKILL_TEST_MYSQL_URL), drops it when the test ends, and returns its
// mysql:// URL.
func MySQLURL(t testing.TB) string {
	t.Helper()
	base := env("SECKILL_TEST_MYSQL_URL", DefaultMySQLURL)
	require(t, "MariaDB", base, "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse SECKILL_TEST_MYSQL_URL: %v", err)
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", u.Host
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("open MariaDB: %v", err)
	}
	defer admin.Close()
	name := "seckill_t_" + Random()
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		admin, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Errorf("open MariaDB: %v", err)
			return
		}
		defer admin.Close()
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// PostgresURL creates a schema for the test on the test PostgreSQL
// (SECKILL_TEST_POSTGRES_URL), drops it when the test ends, and returns a
// postgres:// URL whose search_path is that schema.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := env("SECKILL_TEST_POSTGRES_URL", DefaultPostgresURL)
	require(t, "PostgreSQL", base, "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	name := "seckill_t_" + Random()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Errorf("connect to PostgreSQL: %v", err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse SECKILL_TEST_POSTGRES_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// Random returns 12 random lowercase hex digits, for names that must not
// collide between tests or test runs.
func Random() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// HasRedis reports whether the test Redis answers, or the tests run in CI
// (where RedisURL then fails the test if it does not): tests that can run
// on the embedded backend instead ask this first.
func HasRedis() bool { return CI() || answers(env("SECKILL_TEST_REDIS_URL", DefaultRedisURL)) }

// HasMySQL reports whether the test MariaDB answers, or the tests run in
// CI; see HasRedis.
func HasMySQL() bool { return CI() || answers(env("SECKILL_TEST_MYSQL_URL", DefaultMySQLURL)) }

// CI reports whether the tests run in CI, where a missing service is a
// failure instead of a skip.
func CI() bool { return os.Getenv("CI") != "" }

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// answers reports whether the service at rawURL accepts a TCP connection.
func answers(rawURL string) bool { return dial(rawURL) == nil }

// dial connects to the first host of rawURL and hangs up.
func dial(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	host := u.Host
	if i := strings.IndexByte(host, ','); i >= 0 {
		host = host[:i]
	}
	conn, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// require fails or skips the test unless the service at rawURL accepts a
// TCP connection.
func require(t testing.TB, service, rawURL, start string) {
	t.Helper()
	if _, err := url.Parse(rawURL); err != nil {
		t.Fatalf("%s URL %q: %v", service, rawURL, err)
	}
	err := dial(rawURL)
	if err == nil {
		return
	}
	host := rawURL
	if u, _ := url.Parse(rawURL); u != nil {
		host = u.Host
	}
	msg := fmt.Sprintf("%s at %s does not answer (%v); start it with: %s", service, host, err, start)
	if CI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// RawRedis returns a plain rueidis client of the server at url (a
// redis:// URL, a Cluster's seeds included), for tests that read or write
// the service's keys directly. It is closed when the test ends.
func RawRedis(t testing.TB, url string) rueidis.Client {
	t.Helper()
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to Redis at %s: %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
}

// VoucherKey is the Redis key of one of a voucher's values under prefix,
// as package redis builds it (its keyspace): name is "stock", "meta",
// "buyers", "orders", "dlq" or "changes".
func VoucherKey(prefix string, voucherID int64, name string) string {
	return prefix + ":{v" + strconv.FormatInt(voucherID, 10) + "}:" + name
}
