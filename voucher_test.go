package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/apptest"
	"github.com/seckill/seckill/internal/faults"
	"github.com/seckill/seckill/redis"
	"github.com/seckill/seckill/redisledger"
	"github.com/seckill/seckill/sqlledger"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	valid := func() seckill.Voucher {
		return seckill.Voucher{Title: "t", Stock: 1, BeginTime: now, EndTime: now.Add(time.Hour)}
	}
	for name, tc := range map[string]struct {
		edit func(v *seckill.Voucher)
		want string // "" for valid
	}{
		"valid":             {func(v *seckill.Voucher) {}, ""},
		"begun in the past": {func(v *seckill.Voucher) { v.BeginTime = now.Add(-24 * time.Hour) }, ""},
		"200 characters":    {func(v *seckill.Voucher) { v.Title = strings.Repeat("券", 200) }, ""},
		"max stock":         {func(v *seckill.Voucher) { v.Stock = seckill.MaxStock }, ""},
		"201 characters":    {func(v *seckill.Voucher) { v.Title = strings.Repeat("a", 201) }, "title"},
		"empty title":       {func(v *seckill.Voucher) { v.Title = "" }, "title"},
		"blank title":       {func(v *seckill.Voucher) { v.Title = " \t " }, "title"},
		"invalid UTF-8":     {func(v *seckill.Voucher) { v.Title = "\xff" }, "UTF-8"},
		"control character": {func(v *seckill.Voucher) { v.Title = "a\nb" }, "control"},
		"stock 0":           {func(v *seckill.Voucher) { v.Stock = 0 }, "stock"},
		"stock over max":    {func(v *seckill.Voucher) { v.Stock = seckill.MaxStock + 1 }, "stock"},
		"end before begin": {func(v *seckill.Voucher) {
			v.EndTime = now.Add(-time.Minute)
			v.BeginTime = now.Add(-time.Hour + time.Hour*2)
		}, "endTime"},
		"end equals begin":        {func(v *seckill.Voucher) { v.EndTime = v.BeginTime }, "endTime"},
		"ended":                   {func(v *seckill.Voucher) { v.BeginTime = now.Add(-2 * time.Hour); v.EndTime = now }, "future"},
		"no begin":                {func(v *seckill.Voucher) { v.BeginTime = time.Time{} }, "beginTime"},
		"several problems":        {func(v *seckill.Voucher) { v.Title = ""; v.Stock = 0 }, "title: must not be empty or blank; stock"},
		"pay within a day":        {func(v *seckill.Voucher) { v.PayWithin = seckill.MaxPayWithin }, ""},
		"pay within 20s":          {func(v *seckill.Voucher) { v.PayWithin = 20 * time.Second }, ""},
		"pay within < 0":          {func(v *seckill.Voucher) { v.PayWithin = -time.Second }, "payWithinSeconds"},
		"pay within > day":        {func(v *seckill.Voucher) { v.PayWithin = seckill.MaxPayWithin + time.Second }, "payWithinSeconds"},
		"pay within 1.5s":         {func(v *seckill.Voucher) { v.PayWithin = 1500 * time.Millisecond }, "payWithinSeconds"},
		"challenge, lead an hour": {func(v *seckill.Voucher) { v.Challenge, v.ChallengeLead = true, seckill.MaxChallengeLead }, ""},
		"challenge, no lead":      {func(v *seckill.Voucher) { v.Challenge = true }, ""},
		"lead < 0":                {func(v *seckill.Voucher) { v.ChallengeLead = -time.Second }, "challengeLeadSeconds"},
		"lead > an hour":          {func(v *seckill.Voucher) { v.ChallengeLead = seckill.MaxChallengeLead + time.Second }, "challengeLeadSeconds"},
		"lead 1.5s":               {func(v *seckill.Voucher) { v.ChallengeLead = 1500 * time.Millisecond }, "challengeLeadSeconds"},
		"priced, worth more":      {func(v *seckill.Voucher) { v.Price, v.Value, v.Currency, v.PayWithin = 1250, 2000, "CNY", time.Minute }, ""},
		"worth the price":         {func(v *seckill.Voucher) { v.Price, v.Value, v.PayWithin = 1250, 1250, time.Minute }, ""},
		"free, worth something":   {func(v *seckill.Voucher) { v.Value = 500 }, ""},
		"largest price":           {func(v *seckill.Voucher) { v.Price, v.PayWithin = seckill.MaxAmount, time.Minute }, ""},
		"priced, no deadline":     {func(v *seckill.Voucher) { v.Price = 1250 }, "payWithinSeconds"},
		"price < 0":               {func(v *seckill.Voucher) { v.Price = -1 }, "price"},
		"price > max":             {func(v *seckill.Voucher) { v.Price = seckill.MaxAmount + 1 }, "price"},
		"value < 0":               {func(v *seckill.Voucher) { v.Value = -1 }, "value"},
		"value < price":           {func(v *seckill.Voucher) { v.Price, v.Value = 1250, 1000 }, "value: must be 0 (not said) or at least the price"},
		"currency unknown":        {func(v *seckill.Voucher) { v.Currency = "ABC" }, "currency"},
		"currency lower case":     {func(v *seckill.Voucher) { v.Currency = "usd" }, "currency"},
		"subtitle 200 characters": {func(v *seckill.Voucher) { v.Subtitle = strings.Repeat("券", seckill.MaxSubtitleLength) }, ""},
		"subtitle too long":       {func(v *seckill.Voucher) { v.Subtitle = strings.Repeat("券", seckill.MaxSubtitleLength+1) }, "subtitle"},
		"subtitle line break":     {func(v *seckill.Voucher) { v.Subtitle = "a\nb" }, "subtitle"},
		"rules with lines":        {func(v *seckill.Voucher) { v.Rules = "one\r\ntwo\tthree" }, ""},
		"rules too long":          {func(v *seckill.Voucher) { v.Rules = strings.Repeat("r", seckill.MaxRulesLength+1) }, "rules"},
		"rules escape character":  {func(v *seckill.Voucher) { v.Rules = "a\x1bb" }, "rules"},
		"rules invalid UTF-8":     {func(v *seckill.Voucher) { v.Rules = "\xff" }, "rules"},
		"image https":             {func(v *seckill.Voucher) { v.ImageURL = "https://example.com/v.png?w=2" }, ""},
		"image http":              {func(v *seckill.Voucher) { v.ImageURL = "http://example.com/v.png" }, ""},
		"image data":              {func(v *seckill.Voucher) { v.ImageURL = "data:image/png;base64,AAAA" }, "imageUrl"},
		"image relative":          {func(v *seckill.Voucher) { v.ImageURL = "//example.com/v.png" }, "imageUrl"},
		"image not ASCII":         {func(v *seckill.Voucher) { v.ImageURL = "https://example.com/券.png" }, "imageUrl"},
		"image too long": {func(v *seckill.Voucher) {
			v.ImageURL = "https://example.com/" + strings.Repeat("a", seckill.MaxImageURLLength)
		}, "imageUrl"},
	} {
		t.Run(name, func(t *testing.T) {
			v := valid()
			tc.edit(&v)
			err := v.Validate(now)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, seckill.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrInvalidArgument mentioning %q", err, tc.want)
			}
		})
	}
}

// services returns a VoucherService on a store of the test's own and on
// the Redis at redisURL (if empty: the test Redis under a fresh prefix, or
// the embedded backend where no service answers; see internal/apptest).
func services(t testing.TB, redisURL string) (*seckill.VoucherService, seckill.Store, *logBuffer) {
	t.Helper()
	ctx := context.Background()
	store := apptest.Store(t)
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	var cache *redis.Client
	if redisURL == "" {
		cache, _, _ = apptest.Redis(t, logger)
	} else {
		var err error
		if cache, err = redis.Open(ctx, redis.Config{URL: redisURL}, logger); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cache.Close)
	}
	vs := newVouchers(store, cache, logger, time.Now)
	// As serve starts: the Redis server checked, admissions armed.
	if err := ledgerOf(vs).Restore(ctx); err != nil {
		t.Fatal(err)
	}
	return vs, store, logs
}

// newVouchers returns a VoucherService of the stream mode with its Redis
// ledger, wired as the service wires them.
func newVouchers(store seckill.Store, cache redisledger.Cache, logger *slog.Logger, now func() time.Time) *seckill.VoucherService {
	vs := &seckill.VoucherService{Store: store, Logger: logger, Clock: now}
	vs.Ledger = redisledger.New(cache, vs, logger)
	return vs
}

// admitter returns the Redis ledger over cache (the test's own
// wrapper of the Redis client, say) for the vouchers of vs.
func admitter(vs *seckill.VoucherService, cache redisledger.Cache) *redisledger.Ledger {
	return &redisledger.Ledger{Cache: cache, Vouchers: vs, Fence: ledgerOf(vs).Fence, Logger: vs.Logger}
}

// fencedSlots reads a sold-out voucher's buyers from the cache, fenced,
// without a copy of them.
func fencedSlots(cache *redis.Client) redisledger.SoldOutReader { return cache }

// logBuffer is a log that services write from several goroutines.
type logBuffer struct{ syncBuffer }

var _ io.Writer = (*logBuffer)(nil)

func onSale(title string, stock int64) *seckill.Voucher {
	now := time.Now().UTC().Truncate(time.Microsecond)
	return &seckill.Voucher{Title: title, Stock: stock, BeginTime: now.Add(-time.Minute), EndTime: now.Add(time.Hour)}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	s, store, _ := services(t, "")
	ctx := context.Background()
	if _, err := s.Create(ctx, &seckill.Voucher{Title: "x", Stock: 0}); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Fatalf("Create(stock 0) = %v, want ErrInvalidArgument", err)
	}
	if vs, _ := store.Vouchers(ctx, 10); len(vs) != 0 {
		t.Fatalf("an invalid voucher was stored: %+v", vs[0])
	}
	view, err := s.Create(ctx, onSale("  padded  ", 50))
	if err != nil {
		t.Fatal(err)
	}
	if view.Title != "padded" || view.InitialStock != 50 || view.Remaining == nil || *view.Remaining != 50 {
		t.Fatalf("Create = %+v (remaining %v)", view.Voucher, view.Remaining)
	}
	got, err := s.Get(ctx, view.ID)
	if err != nil || got.Remaining == nil || *got.Remaining != 50 || got.Stock != 50 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := s.Get(ctx, view.ID+1000); !errors.Is(err, seckill.ErrVoucherNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrVoucherNotFound", err)
	}
}

// TestCreateCurrency: a voucher created without a currency is stored in
// the service's, and one with its own keeps it; a voucher made before
// prices (stored with none) is shown in the service's.
func TestCreateCurrency(t *testing.T) {
	t.Parallel()
	s, store, _ := services(t, "")
	s.Currency = "USD"
	ctx := context.Background()
	plain, err := s.Create(ctx, onSale("plain", 5))
	if err != nil {
		t.Fatal(err)
	}
	yen := onSale("yen", 5)
	yen.Price, yen.Currency, yen.PayWithin = 1200, "JPY", time.Minute
	own, err := s.Create(ctx, yen)
	if err != nil {
		t.Fatal(err)
	}
	before := onSale("made before prices", 5)
	before.InitialStock = 5
	if err := store.CreateVoucher(ctx, before); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]string{plain.ID: "USD", own.ID: "JPY", before.ID: "USD"} {
		got, err := s.Get(ctx, id)
		if err != nil || got.Currency != want {
			t.Errorf("Get(%d).Currency = %+v, %v; want %s", id, got, err, want)
		}
	}
	if row, err := store.Voucher(ctx, plain.ID); err != nil || row.Currency != "USD" {
		t.Errorf("stored currency of a voucher created without one = %+v, %v; want USD", row, err)
	}
	list, err := s.List(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range list {
		if v.Currency == "" {
			t.Errorf("listed voucher %d has no currency", v.ID)
		}
	}
	// The list's rows are kept, shared: showing the default changed none.
	if row, err := store.Voucher(ctx, before.ID); err != nil || row.Currency != "" {
		t.Errorf("stored currency of a voucher made before prices = %+v, %v; want none", row, err)
	}
}

// TestRestoreAfterRedisLoss: a Redis that comes back empty gets back every
// voucher still on sale, with its buyers and the stock they leave.
func TestRestoreAfterRedisLoss(t *testing.T) {
	t.Parallel()
	url, kill := faults.StartRedis(t)
	s, store, _ := services(t, url)
	ctx := context.Background()
	fresh, err := s.Create(ctx, onSale("fresh", 10))
	if err != nil {
		t.Fatal(err)
	}
	sold, err := s.Create(ctx, onSale("has orders", 10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.SaveOrders(ctx, []*seckill.Order{{ID: 1001, UserID: 7, VoucherID: sold.ID}}); err != nil {
		t.Fatal(err)
	}
	// Redis dies: creating fails with ErrUnavailable but the voucher is saved.
	kill()
	late, err := s.Create(ctx, onSale("created while Redis was down", 5))
	if !errors.Is(err, seckill.ErrUnavailable) || late != nil {
		t.Fatalf("Create with Redis down = %v, %v; want ErrUnavailable", late, err)
	}
	vs, err := store.Vouchers(ctx, 10)
	if err != nil || len(vs) != 3 || vs[0].Title != "created while Redis was down" {
		t.Fatalf("vouchers in the DB after a failed load: %d, %v", len(vs), err)
	}
	lateID := vs[0].ID
	// A sale that is over needs no stock in Redis.
	now := time.Now().UTC()
	ended := &seckill.Voucher{Title: "over", Stock: 3, InitialStock: 3, BeginTime: now.Add(-2 * time.Hour), EndTime: now.Add(-time.Hour)}
	if err := store.CreateVoucher(ctx, ended); err != nil {
		t.Fatal(err)
	}

	// A new, empty Redis.
	url2, _ := faults.StartRedis(t)
	s2, _, logs := services(t, url2)
	s2.Store = s.Store
	if err := ledgerOf(s2).Restore(ctx); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	for id, want := range map[int64]*int64{fresh.ID: ptr(10), lateID: ptr(5), sold.ID: ptr(9), ended.ID: nil} {
		got, err := s2.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if (got.Remaining == nil) != (want == nil) || (want != nil && *got.Remaining != *want) {
			t.Errorf("voucher %d %q remaining after Restore = %v, want %v", id, got.Title, deref(got.Remaining), deref(want))
		}
	}
	// The buyer of the persisted order is known again: buying twice is refused.
	err = cacheOf(s2).Admit(ctx, seckill.Admission{VoucherID: sold.ID, Generation: sold.Generation, UserID: 7, OrderID: 2002})
	var e *seckill.Error
	if !errors.As(err, &e) || !errors.Is(err, seckill.ErrDuplicateOrder) || e.OrderID != 1001 {
		t.Errorf("admitting the buyer of order 1001 again after Restore = %v, want duplicate_order with 1001", err)
	}
	if !strings.Contains(logs.String(), "rebuilt") {
		t.Errorf("Restore did not log the rebuild; log:\n%s", logs.String())
	}
}

func ptr(n int64) *int64 { return &n }

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// placer is a VoucherService.Placer that says what it was asked.
type placer struct {
	tags  func(generation int64, shards int) []string
	err   error
	calls []placement
}

type placement struct {
	generation int64
	shards     int
}

func (p *placer) PlaceShards(_ context.Context, generation int64, shards int) ([]string, error) {
	p.calls = append(p.calls, placement{generation, shards})
	if p.err != nil {
		return nil, p.err
	}
	return p.tags(generation, shards), nil
}

// TestCreateShards: a sharded voucher's tags come from the placer, asked
// with the voucher's own generation before the row is stored, and are kept
// in the row; an unsharded voucher asks nothing; a placement that fails
// creates nothing; the sync and queue modes refuse shards.
func TestCreateShards(t *testing.T) {
	t.Parallel()
	s, store, _ := services(t, "")
	ctx := context.Background()
	p := &placer{tags: func(generation int64, shards int) []string {
		tags := make([]string, shards)
		for i := range tags {
			tags[i] = fmt.Sprintf("g%s.%d.%d", strconv.FormatInt(generation, 36), i, 7*i)
		}
		return tags
	}}
	s.Placer = p

	plain, err := s.Create(ctx, onSale("unsharded", 10))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.calls) != 0 || plain.ShardCount() != 1 || plain.ShardTags != nil {
		t.Errorf("an unsharded voucher: placer asked %v, shards %d, tags %q; want no call, 1, none", p.calls, plain.ShardCount(), plain.ShardTags)
	}

	v := onSale("sharded", 60)
	v.Shards = 6
	view, err := s.Create(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.calls) != 1 || p.calls[0] != (placement{view.Generation, 6}) {
		t.Fatalf("placer asked %+v; want once, for generation %d and 6 shards", p.calls, view.Generation)
	}
	row, err := store.Voucher(ctx, view.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := p.tags(view.Generation, 6)
	if row.Shards != 6 || !slices.Equal(row.ShardTags, want) || !slices.Equal(view.ShardTags, want) {
		t.Errorf("the row holds %d shards %q, Create said %q; want 6 shards %q", row.Shards, row.ShardTags, view.ShardTags, want)
	}

	// A placement that fails, or gives the wrong count, creates nothing.
	count := func() int {
		t.Helper()
		vs, err := store.Vouchers(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(vs)
	}
	before := count()
	for name, bad := range map[string]*placer{
		"error":       {err: errors.New("cluster down")},
		"short count": {tags: func(int64, int) []string { return []string{"a"} }},
	} {
		s.Placer = bad
		v := onSale("placement "+name, 10)
		v.Shards = 3
		if _, err := s.Create(ctx, v); !errors.Is(err, seckill.ErrUnavailable) {
			t.Errorf("Create with a placement %s = %v; want ErrUnavailable", name, err)
		}
	}
	if n := count(); n != before {
		t.Errorf("failed placements stored %d vouchers", n-before)
	}

	// A placement with nothing to choose (not a Cluster) gives no tags:
	// the shards take the default ones.
	s.Placer = &placer{tags: func(int64, int) []string { return nil }}
	dflt := onSale("placement off a Cluster", 10)
	dflt.Shards = 3
	view, err = s.Create(ctx, dflt)
	if err != nil {
		t.Fatalf("Create with no tags placed: %v", err)
	}
	if view.ShardTags != nil || view.ShardTag(2) != seckill.DefaultShardTag(view.ID, 3, 2) {
		t.Errorf("no tags placed: tags %q, shard 2's %q; want none, the default", view.ShardTags, view.ShardTag(2))
	}
	before = count()

	// Only the stream mode takes shards.
	s.Placer = p
	redis := s.Ledger
	for _, mode := range []seckill.Mode{seckill.ModeSync, seckill.ModeQueue} {
		switch mode {
		case seckill.ModeSync:
			s.Ledger = &sqlledger.Ledger{Store: store}
		case seckill.ModeQueue:
			queued := redisledger.New(redis.(*redisledger.Ledger).Cache, s, s.Logger)
			queued.Queued = true
			s.Ledger = queued
		}
		v := onSale("in "+string(mode), 10)
		v.Shards = 2
		_, err := s.Create(ctx, v)
		if !errors.Is(err, seckill.ErrInvalidArgument) || !strings.Contains(err.Error(), "shards") || !strings.Contains(err.Error(), string(mode)) {
			t.Errorf("Create of 2 shards in the %s mode = %v; want ErrInvalidArgument naming shards and the mode", mode, err)
		}
	}
	if n := count(); n != before || len(p.calls) != 1 {
		t.Errorf("refused vouchers: %d stored, placer asked %d times; want none", n-before, len(p.calls)-1)
	}
}

// listCounter is a store that counts its reads of the voucher list.
type listCounter struct {
	seckill.Store
	reads atomic.Int64
}

func (s *listCounter) Vouchers(ctx context.Context, limit int) ([]*seckill.Voucher, error) {
	s.reads.Add(1)
	return s.Store.Vouchers(ctx, limit)
}

// TestListKeepsRows: a crowd listing the vouchers at once (the sale page's
// visitors) costs the database one read a second, not one each; the
// remaining stock is read afresh, and a voucher created here is listed at
// once.
func TestListKeepsRows(t *testing.T) {
	t.Parallel()
	vs, store, _ := services(t, "")
	counted := &listCounter{Store: store}
	vs.Store = counted
	ctx := t.Context()
	v := onSale("listed", 10)
	if _, err := vs.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if views, err := vs.List(ctx, 100); err != nil || len(views) != 1 {
				t.Errorf("List = %d vouchers, %v; want 1", len(views), err)
			}
		})
	}
	wg.Wait()
	if n := counted.reads.Load(); n != 1 {
		t.Errorf("200 lists read the database %d times, want once", n)
	}
	// The stock is read afresh: a buy shows at once.
	if err := cacheOf(vs).Admit(ctx, seckill.Admission{VoucherID: v.ID, UserID: 1, OrderID: 1, Generation: v.Generation}); err != nil {
		t.Fatal(err)
	}
	views, err := vs.List(ctx, 100)
	if err != nil || *views[0].Remaining != 9 {
		t.Fatalf("List after a buy: %v, %v; want 9 remaining", views, err)
	}
	// A voucher created here is listed at once.
	if _, err := vs.Create(ctx, onSale("new", 5)); err != nil {
		t.Fatal(err)
	}
	if views, err := vs.List(ctx, 100); err != nil || len(views) != 2 {
		t.Errorf("List after a create = %d vouchers, %v; want 2", len(views), err)
	}
}

// redisLedger is the Redis ledger of an order service of these tests.
func redisLedger(o *seckill.OrderService) *redisledger.Ledger { return o.Ledger.(*redisledger.Ledger) }

// ledgerOf is the Redis ledger of a voucher service of these tests.
func ledgerOf(vs *seckill.VoucherService) *redisledger.Ledger { return vs.Ledger.(*redisledger.Ledger) }

// cacheOf is the Redis client under a voucher service of these tests.
func cacheOf(vs *seckill.VoucherService) *redis.Client { return ledgerOf(vs).Cache.(*redis.Client) }
