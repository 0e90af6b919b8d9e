package soldout_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/soldout"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakIgnores()...)
}

// defaultWait bounds the waits on a Cluster's failover and replication.
const defaultWait = 30 * time.Second

// backend is a Redis the copies are tested against, under a key prefix of
// the test's own, with a raw client for what the service never does.
type backend struct {
	url      string
	prefix   string
	embedded bool
	raw      rueidis.Client
}

// inst is one instance of the service as the copies see it: its Redis
// client and its copies over it.
type inst struct {
	c      *redis.Client
	copies *soldout.Copies
}

// each runs test against the real Redis of this machine, a Redis Cluster
// and the embedded server: the same code must behave the same on all.
func each(t *testing.T, test func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		test(t, newBackend(t, testenv.RedisURL(t), testenv.RedisPrefix(t), false))
	})
	t.Run("cluster", func(t *testing.T) {
		// Every key a script or pipeline touches must be in one slot; a
		// Cluster refuses the ones that are not (CROSSSLOT).
		t.Parallel()
		test(t, newBackend(t, faults.SharedCluster(t).URL, "t"+testenv.Random(), false))
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		test(t, newBackend(t, "redis://"+embeddedServer(t), "", true))
	})
}

// embeddedServer starts an embedded server for the test and returns its
// address.
func embeddedServer(t *testing.T) string {
	t.Helper()
	server, err := redis.OpenEmbedded("", testenv.Logger(t))
	if err != nil {
		t.Fatalf("OpenEmbedded: %v", err)
	}
	t.Cleanup(server.Close)
	return server.Addr()
}

// singleServer returns the backend of this machine's Redis, or of an
// embedded server of the test's own.
func singleServer(t *testing.T, embedded bool) *backend {
	t.Helper()
	if embedded {
		return newBackend(t, "redis://"+embeddedServer(t), "", true)
	}
	return newBackend(t, testenv.RedisURL(t), testenv.RedisPrefix(t), false)
}

// newBackend returns the backend of the Redis at url, its raw client
// closed when the test ends.
func newBackend(t *testing.T, url, prefix string, embedded bool) *backend {
	t.Helper()
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache, opt.ForceSingleClient = true, embedded
	raw, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(raw.Close)
	return &backend{url: url, prefix: prefix, embedded: embedded, raw: raw}
}

// open returns an instance on the backend, reached at addr if not "" (a
// proxy), its admission armed; closed when the test ends.
func (b *backend) open(t *testing.T, addr string, cfg soldout.Config) *inst {
	t.Helper()
	url := b.url
	if addr != "" {
		url = "redis://" + addr
	}
	c, err := redis.Open(context.Background(), redis.Config{URL: url, Prefix: b.prefix, Embedded: b.embedded}, testenv.Logger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(c.Close)
	arm(t, c)
	copies := soldout.New(c, cfg, testenv.Logger(t))
	t.Cleanup(copies.Close) // before c's
	return &inst{c: c, copies: copies}
}

// target is the address of a single server backend, for a proxy to it.
func (b *backend) target() string {
	addr, _, _ := strings.Cut(strings.TrimPrefix(b.url, "redis://"), "/")
	return addr
}

// key returns one of the voucher's keys (redis/keys.go).
func (b *backend) key(voucherID int64, name string) string {
	prefix := b.prefix
	if prefix == "" {
		prefix = redis.DefaultPrefix
	}
	return prefix + ":{v" + strconv.FormatInt(voucherID, 10) + "}:" + name
}

// do runs a raw command and fails the test on an error other than nil.
func (b *backend) do(t testing.TB, cmd ...string) rueidis.RedisResult {
	t.Helper()
	res := b.raw.Do(context.Background(), b.raw.B().Arbitrary(cmd...).Build())
	if err := res.Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("%v: %v", cmd, err)
	}
	return res
}

// stock returns the voucher's stock key's value, or -1 if it is absent.
func (b *backend) stock(t *testing.T, voucherID int64) int64 {
	t.Helper()
	n, err := b.do(t, "GET", b.key(voucherID, "stock")).AsInt64()
	if rueidis.IsRedisNil(err) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// hash returns a hash's fields; empty when it is absent.
func (b *backend) hash(t *testing.T, key string) map[string]string {
	t.Helper()
	m, err := b.do(t, "HGETALL", key).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// entries returns a stream's entries, oldest first.
func (b *backend) entries(t *testing.T, key string) []rueidis.XRangeEntry {
	t.Helper()
	e, err := b.do(t, "XRANGE", key, "-", "+").AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// arm lets admissions run, as an instance does once it checked the server.
func arm(t testing.TB, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	id, err := c.Identity(ctx)
	if err != nil {
		t.Fatalf("Identity: %v", err)
	}
	if err := c.ArmAdmission(ctx, id); err != nil {
		t.Fatalf("ArmAdmission: %v", err)
	}
}

// onSale returns a voucher whose sale began a minute ago and ends in an hour.
func onSale(id, stock int64) *seckill.Voucher {
	now := time.Now()
	return &seckill.Voucher{ID: id, Stock: stock, InitialStock: stock, BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour)}
}

// mustLoad loads v, a voucher new to Redis.
func mustLoad(t *testing.T, c *redis.Client, v *seckill.Voucher) {
	t.Helper()
	replaced, err := c.LoadVoucher(context.Background(), v)
	if err != nil || replaced {
		t.Fatalf("LoadVoucher(%d) = %v, %v; want false (nothing stale), nil", v.ID, replaced, err)
	}
}

// mustAdmit admits user with order and fails the test otherwise.
func mustAdmit(t *testing.T, c *redis.Client, voucherID, userID, orderID int64) {
	t.Helper()
	if err := c.Admit(context.Background(), seckill.Admission{VoucherID: voucherID, UserID: userID, OrderID: orderID}); err != nil {
		t.Fatalf("Admit(voucher %d, user %d, order %d): %v", voucherID, userID, orderID, err)
	}
}

// noOrders is a database that holds no order, for a rebuild.
func noOrders(context.Context, int64, int64, int) ([]*seckill.Order, error) { return nil, nil }

// waitCopied waits until the voucher's buyers are answered from a copy.
func waitCopied(t *testing.T, s *soldout.Copies, voucherID int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.SoldOutBuyerOrder(context.Background(), 0, voucherID); err != nil {
			t.Fatalf("SoldOutBuyerOrder: %v", err)
		}
		if s.Copied(voucherID) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("voucher %d: no trusted copy of its buyers after 10s", voucherID)
		}
		time.Sleep(soldout.Poll)
	}
}

// fromCopy asks for the user's order until the answer came while the copy
// of the voucher was trusted (a loaded machine may delay the polls that
// keep it so), and returns that answer.
func fromCopy(t *testing.T, s *soldout.Copies, userID, voucherID int64) int64 {
	t.Helper()
	for range 50 {
		waitCopied(t, s, voucherID)
		cp := s.Copy(voucherID)
		if cp == nil {
			continue
		}
		until := cp.Trusted()
		got := soldOutOrder(t, s, userID, voucherID)
		if s.Mono() < until {
			return got
		}
	}
	t.Fatalf("voucher %d: no answer while its copy was trusted in 50 tries", voucherID)
	return 0
}

func soldOutOrder(t *testing.T, s interface {
	SoldOutBuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error)
}, userID, voucherID int64) int64 {
	t.Helper()
	id, err := s.SoldOutBuyerOrder(context.Background(), userID, voucherID)
	if err != nil {
		t.Fatalf("SoldOutBuyerOrder(user %d, voucher %d): %v", userID, voucherID, err)
	}
	return id
}
