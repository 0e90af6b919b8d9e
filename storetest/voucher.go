package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
)

func (s suite) testVoucherRoundTrip(t *testing.T) {
	st := s.store(t)
	v := &seckill.Voucher{
		Title:        "秒杀 Café 🎉 voucher",
		Stock:        7,
		InitialStock: 9,
		BeginTime:    base,
		EndTime:      base.Add(36*time.Hour + 999*time.Nanosecond),
		Generation:   -1 << 62, // any int64 round-trips
	}
	before := time.Now()
	if err := st.CreateVoucher(t.Context(), v); err != nil {
		t.Fatalf("CreateVoucher: %v", err)
	}
	after := time.Now()
	if v.ID <= 0 {
		t.Errorf("CreateVoucher set ID = %d; want > 0", v.ID)
	}
	checkNow(t, "CreateVoucher set CreatedAt", v.CreatedAt, before, after)
	checkUTC(t, "CreateVoucher set CreatedAt", v.CreatedAt)

	got, err := st.Voucher(t.Context(), v.ID)
	if err != nil {
		t.Fatalf("Voucher(%d): %v", v.ID, err)
	}
	want := &seckill.Voucher{
		ID:           v.ID,
		Title:        v.Title,
		Stock:        7,
		InitialStock: 9,
		BeginTime:    micro(v.BeginTime),
		EndTime:      micro(v.EndTime),
		// The time the store wrote is the time it reported.
		CreatedAt:  v.CreatedAt,
		Generation: v.Generation,
		Shards:     1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Voucher(%d) (-want +got):\n%s", v.ID, diff)
	}
	checkUTC(t, "Voucher", got.BeginTime, got.EndTime, got.CreatedAt)

	// A second voucher gets another id.
	w := newVoucher(t, st, 1)
	if w.ID == v.ID {
		t.Errorf("two vouchers got the same id %d", w.ID)
	}
}

func (s suite) testVoucherLongUnicodeTitle(t *testing.T) {
	st := s.store(t)
	// MaxTitleLength characters of four bytes each: the column counts
	// characters, and holds characters outside the Basic Multilingual Plane.
	title := strings.Repeat("🎉", seckill.MaxTitleLength/2) + strings.Repeat("秒", seckill.MaxTitleLength/2)
	v := &seckill.Voucher{Title: title, Stock: 1, InitialStock: 1, BeginTime: base, EndTime: base.Add(time.Hour)}
	if err := st.CreateVoucher(t.Context(), v); err != nil {
		t.Fatalf("CreateVoucher with a %d-character title: %v", seckill.MaxTitleLength, err)
	}
	got, err := st.Voucher(t.Context(), v.ID)
	if err != nil {
		t.Fatalf("Voucher: %v", err)
	}
	if got.Title != title {
		t.Errorf("title read back = %q; want %q", got.Title, title)
	}
}

func (s suite) testVoucherNotFound(t *testing.T) {
	st := s.store(t)
	v := newVoucher(t, st, 1)
	for _, id := range []int64{v.ID + 1, 0, -1} {
		got, err := st.Voucher(t.Context(), id)
		if !errors.Is(err, seckill.ErrVoucherNotFound) {
			t.Errorf("Voucher(%d) = %+v, %v; want ErrVoucherNotFound", id, got, err)
		}
	}
}

func (s suite) testVoucherNegativeStock(t *testing.T) {
	st := s.store(t)
	for _, tc := range []struct {
		name           string
		stock, initial int64
	}{
		{"stock", -1, 1},
		{"initial stock", 1, -1},
	} {
		v := &seckill.Voucher{Title: "negative " + tc.name, Stock: tc.stock, InitialStock: tc.initial, BeginTime: base, EndTime: base.Add(time.Hour)}
		err := st.CreateVoucher(t.Context(), v)
		if !errors.Is(err, seckill.ErrInvalidArgument) {
			t.Errorf("CreateVoucher with a negative %s: %v; want an error wrapping ErrInvalidArgument", tc.name, err)
		}
	}
	vs, err := st.Vouchers(t.Context(), 0)
	if err != nil {
		t.Fatalf("Vouchers: %v", err)
	}
	if len(vs) != 0 {
		t.Errorf("refused vouchers were stored: %+v", vs)
	}
	// Zero is a valid stock: a voucher sold out.
	newVoucher(t, st, 0)
}

// testVoucherShards: a sharded voucher's shards and their tags round-trip
// through every read; an unsharded one (Shards 0, as every voucher made
// before shards) is stored and read with Shards 1 and no tags.
func (s suite) testVoucherShards(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	tags := []string{"g1x2k3.0.17", "g1x2k3.1.4", "g1x2k3.2.0", "g1x2k3.3.250", "g1x2k3.4.9", "g1x2k3.5.31"}
	sharded := &seckill.Voucher{Title: "sharded", Stock: 60, InitialStock: 60, BeginTime: base, EndTime: base.Add(time.Hour),
		Generation: 42, Shards: 6, ShardTags: slices.Clone(tags)}
	defaults := &seckill.Voucher{Title: "default tags", Stock: 8, InitialStock: 8, BeginTime: base, EndTime: base.Add(time.Hour), Shards: 4}
	plain := &seckill.Voucher{Title: "unsharded", Stock: 5, InitialStock: 5, BeginTime: base, EndTime: base.Add(time.Hour)}
	for _, v := range []*seckill.Voucher{sharded, defaults, plain} {
		if err := st.CreateVoucher(ctx, v); err != nil {
			t.Fatalf("CreateVoucher(%q): %v", v.Title, err)
		}
	}
	if plain.Shards != 1 {
		t.Errorf("CreateVoucher of a voucher with Shards 0 set Shards = %d; want 1, as stored", plain.Shards)
	}
	want := map[int64]*seckill.Voucher{
		sharded.ID:  storedVoucher(&seckill.Voucher{ID: sharded.ID, Title: "sharded", Stock: 60, InitialStock: 60, BeginTime: base, EndTime: base.Add(time.Hour), CreatedAt: sharded.CreatedAt, Generation: 42, Shards: 6, ShardTags: tags}),
		defaults.ID: storedVoucher(&seckill.Voucher{ID: defaults.ID, Title: "default tags", Stock: 8, InitialStock: 8, BeginTime: base, EndTime: base.Add(time.Hour), CreatedAt: defaults.CreatedAt, Shards: 4}),
		plain.ID:    storedVoucher(&seckill.Voucher{ID: plain.ID, Title: "unsharded", Stock: 5, InitialStock: 5, BeginTime: base, EndTime: base.Add(time.Hour), CreatedAt: plain.CreatedAt, Shards: 1}),
	}
	readsBack(t, st, want)

	// The column's separator cannot be in a tag: it would read back as two.
	bad := &seckill.Voucher{Title: "bad tag", Stock: 2, InitialStock: 2, BeginTime: base, EndTime: base.Add(time.Hour), Shards: 2, ShardTags: []string{"a,b", "c"}}
	if err := st.CreateVoucher(ctx, bad); !errors.Is(err, seckill.ErrInvalidArgument) {
		t.Errorf("CreateVoucher with the tag \"a,b\": %v; want an error wrapping ErrInvalidArgument", err)
	}
}

// testVoucherPayment: a voucher's pay deadline and rebuy rule
// round-trip through every read, each on its own (a column read into the
// other field would show); one created without them (as every voucher made
// before) reads no deadline and no rebuy.
func (s suite) testVoucherPayment(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	mk := func(title string, payWithin time.Duration, rebuy bool) *seckill.Voucher {
		return &seckill.Voucher{Title: title, Stock: 5, InitialStock: 5, BeginTime: base, EndTime: base.Add(time.Hour),
			Generation: 7, PayWithin: payWithin, RebuyAfterCancel: rebuy}
	}
	created := []*seckill.Voucher{
		mk("pay in 20s, rebuy", 20*time.Second, true),
		mk("pay in a day", 24*time.Hour, false),
		mk("rebuy only", 0, true),
		mk("as before", 0, false),
	}
	want := map[int64]*seckill.Voucher{}
	for _, v := range created {
		payWithin, rebuy := v.PayWithin, v.RebuyAfterCancel
		if err := st.CreateVoucher(ctx, v); err != nil {
			t.Fatalf("CreateVoucher(%q): %v", v.Title, err)
		}
		if v.PayWithin != payWithin || v.RebuyAfterCancel != rebuy {
			t.Errorf("CreateVoucher(%q) changed PayWithin, RebuyAfterCancel to %v, %v; want %v, %v", v.Title, v.PayWithin, v.RebuyAfterCancel, payWithin, rebuy)
		}
		want[v.ID] = storedVoucher(&seckill.Voucher{ID: v.ID, Title: v.Title, Stock: 5, InitialStock: 5, BeginTime: base, EndTime: base.Add(time.Hour),
			CreatedAt: v.CreatedAt, Generation: 7, Shards: 1, PayWithin: payWithin, RebuyAfterCancel: rebuy})
	}
	readsBack(t, st, want)
}

// testVoucherSale: what a voucher sells (its price, value, currency,
// subtitle, rules and image) round-trips through every read, each field
// on its own (a column read into another field would show), at the
// columns' bounds; one created without them (as every voucher made before)
// reads price 0, value 0 and currency "" (the service's default). A
// negative price or value is refused by the database too.
func (s suite) testVoucherSale(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	mk := func(title string, price, value int64, currency, subtitle, rules, image string) *seckill.Voucher {
		return &seckill.Voucher{Title: title, Stock: 5, InitialStock: 5, BeginTime: base, EndTime: base.Add(time.Hour), Generation: 3,
			Price: price, Value: value, Currency: currency, Subtitle: subtitle, Rules: rules, ImageURL: image}
	}
	created := []*seckill.Voucher{
		mk("coffee", 1250, 2000, "CNY", "一杯咖啡 ☕ Café", "Valid 30 days.\nOne per visit;\tnot with other offers.", "https://img.example.com/c.png?s=2&q=%E2%98%95"),
		mk("ramen", 1200, 0, "JPY", "", "", "http://example.com/r.jpg"),
		mk("free sample", 0, 500, "USD", "try it", "", ""),
		mk("largest", seckill.MaxAmount, seckill.MaxAmount, "EUR", strings.Repeat("🎉", seckill.MaxSubtitleLength),
			strings.Repeat("秒", seckill.MaxRulesLength), "https://example.com/"+strings.Repeat("a", seckill.MaxImageURLLength-len("https://example.com/"))),
		mk("as before", 0, 0, "", "", "", ""),
	}
	want := map[int64]*seckill.Voucher{}
	for _, v := range created {
		sent := *v
		if err := st.CreateVoucher(ctx, v); err != nil {
			t.Fatalf("CreateVoucher(%q): %v", v.Title, err)
		}
		w := sent
		w.ID, w.CreatedAt, w.Shards = v.ID, v.CreatedAt, 1
		want[v.ID] = storedVoucher(&w)
	}
	readsBack(t, st, want)

	for _, bad := range []*seckill.Voucher{mk("negative price", -1, 0, "CNY", "", "", ""), mk("negative value", 0, -1, "CNY", "", "", "")} {
		if err := st.CreateVoucher(ctx, bad); !errors.Is(err, seckill.ErrInvalidArgument) {
			t.Errorf("CreateVoucher(%q): %v; want an error wrapping ErrInvalidArgument", bad.Title, err)
		}
	}
}

// readsBack fails the test unless every read of the store (Voucher,
// Vouchers, UnendedVouchers) gives back exactly the vouchers want, by id:
// all the vouchers st holds.
func readsBack(t *testing.T, st seckill.Store, want map[int64]*seckill.Voucher) {
	t.Helper()
	ctx := t.Context()
	check := func(read string, got []*seckill.Voucher) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s read %d vouchers; want %d", read, len(got), len(want))
		}
		for _, v := range got {
			if diff := cmp.Diff(want[v.ID], v); diff != "" {
				t.Errorf("%s: voucher %d (-want +got):\n%s", read, v.ID, diff)
			}
		}
	}
	var one []*seckill.Voucher
	for id := range want {
		v, err := st.Voucher(ctx, id)
		if err != nil {
			t.Fatalf("Voucher(%d): %v", id, err)
		}
		one = append(one, v)
	}
	check("Voucher", one)
	all, err := st.Vouchers(ctx, 10)
	if err != nil {
		t.Fatalf("Vouchers: %v", err)
	}
	check("Vouchers", all)
	unended, err := st.UnendedVouchers(ctx, base)
	if err != nil {
		t.Fatalf("UnendedVouchers: %v", err)
	}
	check("UnendedVouchers", unended)
}

// storedVoucher is how the store gives back v once created.
func storedVoucher(v *seckill.Voucher) *seckill.Voucher {
	w := *v
	w.BeginTime, w.EndTime, w.CreatedAt = micro(v.BeginTime), micro(v.EndTime), micro(v.CreatedAt)
	return &w
}

// voucherIDs returns the ids of vs, in order.
func voucherIDs(vs []*seckill.Voucher) []int64 {
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	return ids
}

func (s suite) testVouchersOrderAndLimit(t *testing.T) {
	st := s.store(t)
	if vs, err := st.Vouchers(t.Context(), 10); err != nil || len(vs) != 0 {
		t.Errorf("Vouchers of an empty store = %v, %v; want none", vs, err)
	}
	var created []*seckill.Voucher
	for i := range 5 {
		created = append(created, newVoucher(t, st, int64(i+1)))
	}
	newestFirst := []int64{created[4].ID, created[3].ID, created[2].ID, created[1].ID, created[0].ID}
	for _, tc := range []struct {
		limit int
		want  []int64
	}{
		{0, newestFirst},
		{-1, newestFirst},
		{10, newestFirst},
		{5, newestFirst},
		{2, newestFirst[:2]},
		{1, newestFirst[:1]},
	} {
		got, err := st.Vouchers(t.Context(), tc.limit)
		if err != nil {
			t.Fatalf("Vouchers(%d): %v", tc.limit, err)
		}
		if diff := cmp.Diff(tc.want, voucherIDs(got)); diff != "" {
			t.Errorf("Vouchers(%d) ids (-want +got):\n%s", tc.limit, diff)
		}
	}
	// The listed vouchers are whole.
	got, err := st.Vouchers(t.Context(), 1)
	if err != nil {
		t.Fatalf("Vouchers: %v", err)
	}
	if diff := cmp.Diff(storedVoucher(created[4]), got[0]); diff != "" {
		t.Errorf("listed voucher (-created +listed):\n%s", diff)
	}
	checkUTC(t, "Vouchers", got[0].BeginTime, got[0].EndTime, got[0].CreatedAt)
}

func (s suite) testVouchersDefaultLimit(t *testing.T) {
	st := s.store(t)
	const n = 101
	var last *seckill.Voucher
	for range n {
		last = newVoucher(t, st, 1)
	}
	for _, limit := range []int{0, -5} {
		got, err := st.Vouchers(t.Context(), limit)
		if err != nil {
			t.Fatalf("Vouchers(%d): %v", limit, err)
		}
		if len(got) != 100 {
			t.Errorf("Vouchers(%d) returned %d vouchers of %d; want the default of 100", limit, len(got), n)
		}
		if len(got) > 0 && got[0].ID != last.ID {
			t.Errorf("Vouchers(%d) starts with voucher %d; want the newest, %d", limit, got[0].ID, last.ID)
		}
	}
	got, err := st.Vouchers(t.Context(), 1000)
	if err != nil {
		t.Fatalf("Vouchers(1000): %v", err)
	}
	if len(got) != n {
		t.Errorf("Vouchers(1000) returned %d vouchers; want all %d", len(got), n)
	}
}

func (s suite) testUnendedVouchers(t *testing.T) {
	st := s.store(t)
	now := base.Add(24 * time.Hour)
	create := func(end time.Time) *seckill.Voucher {
		t.Helper()
		v := &seckill.Voucher{Title: "ends " + end.String(), Stock: 3, InitialStock: 3, BeginTime: base, EndTime: end}
		if err := st.CreateVoucher(t.Context(), v); err != nil {
			t.Fatalf("CreateVoucher: %v", err)
		}
		return v
	}
	// Created in an order unlike their end times: oldest first means the
	// order of creation.
	late := create(now.Add(time.Hour))
	create(now.Add(-time.Hour))
	soon := create(now.Add(time.Microsecond))
	create(now)
	later := create(now.Add(48 * time.Hour))

	got, err := st.UnendedVouchers(t.Context(), now)
	if err != nil {
		t.Fatalf("UnendedVouchers: %v", err)
	}
	want := []int64{late.ID, soon.ID, later.ID}
	if diff := cmp.Diff(want, voucherIDs(got)); diff != "" {
		t.Errorf("UnendedVouchers(now) ids (-want +got):\n%s", diff)
	}
	if len(got) > 0 {
		if diff := cmp.Diff(storedVoucher(late), got[0]); diff != "" {
			t.Errorf("unended voucher (-created +listed):\n%s", diff)
		}
	}
	// The argument's zone does not matter.
	got, err = st.UnendedVouchers(t.Context(), now.In(time.FixedZone("UTC-5", -5*3600)))
	if err != nil {
		t.Fatalf("UnendedVouchers: %v", err)
	}
	if diff := cmp.Diff(want, voucherIDs(got)); diff != "" {
		t.Errorf("UnendedVouchers(now in UTC-5) ids (-want +got):\n%s", diff)
	}

	got, err = st.UnendedVouchers(t.Context(), now.Add(100*time.Hour))
	if err != nil {
		t.Fatalf("UnendedVouchers: %v", err)
	}
	if len(got) != 0 {
		t.Errorf("UnendedVouchers after every end = %v; want none", voucherIDs(got))
	}
}

// testVoucherChallenge: a voucher's challenge and its lead
// round-trip through every read, each on its own; one created without
// them (as every voucher made before) reads no challenge and no lead.
func (s suite) testVoucherChallenge(t *testing.T) {
	st := s.store(t)
	ctx := t.Context()
	mk := func(title string, challenge bool, lead time.Duration) *seckill.Voucher {
		return &seckill.Voucher{Title: title, Stock: 5, InitialStock: 5, BeginTime: base, EndTime: base.Add(time.Hour),
			Generation: 7, Challenge: challenge, ChallengeLead: lead}
	}
	created := []*seckill.Voucher{
		mk("challenge, lead 60s", true, 60*time.Second),
		mk("challenge, lead an hour", true, time.Hour),
		mk("challenge, no lead", true, 0),
		mk("lead only", false, 30*time.Second),
		mk("as before", false, 0),
	}
	want := map[int64]*seckill.Voucher{}
	for _, v := range created {
		challenge, lead := v.Challenge, v.ChallengeLead
		if err := st.CreateVoucher(ctx, v); err != nil {
			t.Fatalf("CreateVoucher(%q): %v", v.Title, err)
		}
		want[v.ID] = storedVoucher(&seckill.Voucher{ID: v.ID, Title: v.Title, Stock: 5, InitialStock: 5, BeginTime: base, EndTime: base.Add(time.Hour),
			CreatedAt: v.CreatedAt, Generation: 7, Shards: 1, Challenge: challenge, ChallengeLead: lead})
	}
	readsBack(t, st, want)
}
