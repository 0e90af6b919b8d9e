package seckill

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sync/singleflight"
)

// Limits on a voucher, checked by [Voucher.Validate].
const (
	MaxTitleLength = 200
	MaxStock       = 10_000_000
	// MaxPayWithin bounds Voucher.PayWithin: a unit held longer than a
	// day by a buyer who may never pay is not a flash sale's.
	MaxPayWithin = 24 * time.Hour
	// DefaultPricedPayWithin is the PayWithin of a voucher created with a
	// price and no deadline (the API's default): a priced order must be
	// paid, and a unit held by one that never is must come back on sale.
	// A quarter of an hour, as shops commonly give.
	DefaultPricedPayWithin = 15 * time.Minute
	// MaxChallengeLead bounds Voucher.ChallengeLead: a challenge issued
	// longer before the start could be solved at leisure, which its lead
	// is there to prevent.
	MaxChallengeLead = time.Hour
	// DefaultChallengeLead is the ChallengeLead of a voucher created with
	// a challenge and no lead (the API's default): long enough for a buyer
	// to load the page and solve before the start, short enough that
	// nobody stockpiles solutions.
	DefaultChallengeLead = 60 * time.Second
	// MaxSubtitleLength and MaxRulesLength bound Voucher.Subtitle and
	// Voucher.Rules, in characters: a line under the title, and terms of
	// use that fit a page.
	MaxSubtitleLength = 200
	MaxRulesLength    = 5000
	// MaxImageURLLength bounds Voucher.ImageURL, in bytes.
	MaxImageURLLength = 2048
)

// Voucher is an item on flash sale: a limited stock sold one per buyer
// within a sale window [BeginTime, EndTime).
type Voucher struct {
	ID    int64
	Title string
	// Stock is what the database still has to sell: InitialStock less the
	// orders persisted so far.
	Stock        int64
	InitialStock int64
	BeginTime    time.Time
	EndTime      time.Time
	CreatedAt    time.Time
	// Generation tells this voucher apart from an earlier one that had the
	// same id: a database that was reset, or two databases sharing one
	// Redis key prefix. It is made at creation (never 0 since it exists; 0
	// for vouchers made before) and kept with the voucher's state in the
	// cache, where loading and rebuilding replace only state of another
	// generation, and admission refuses it.
	Generation int64
	// Shards is how many shards the voucher's stock is split into in the
	// cache, 1 to MaxShards (see Shard); 0, as read for vouchers made before
	// shards, is 1. Queue and sync modes take only 1.
	Shards int
	// ShardTags are the shards' hash tags in the cache, chosen at creation
	// so that the shards land on distinct Redis masters (placement); empty
	// for an unsharded voucher. ShardTag falls back to DefaultShardTag.
	ShardTags []string
	// PayWithin is how long after an order is created its buyer has to pay
	// (the order lifecycle); 0, as read for vouchers made before, keeps orders
	// created with no deadline. Whole seconds, at most MaxPayWithin.
	PayWithin time.Duration
	// RebuyAfterCancel lets a buyer whose order was cancelled buy the
	// voucher again; by default they cannot.
	RebuyAfterCancel bool
	// Challenge makes every buy carry a solved proof-of-work challenge
	// (ChallengeService); false, as read for vouchers made
	// before, buys as they always did.
	Challenge bool
	// ChallengeLead is how long before BeginTime challenges are issued, so
	// that solving does not race the start while solving hours ahead stays
	// impossible. Whole seconds, at most MaxChallengeLead; the API
	// defaults it to DefaultChallengeLead.
	ChallengeLead time.Duration
	// Paused says an operator paused the sale (VoucherService.Pause):
	// admission answers ErrPaused, and admits nobody, until resumed.
	Paused bool

	// Price is what a buyer pays for the voucher, in Currency's minor
	// units (fen, cents); 0 is free. It is fixed at creation: an order owes
	// its voucher's price (Order.Amount).
	Price int64
	// Value is what the voucher is worth, in the same units; 0: not said.
	// When said it is at least the price.
	Value int64
	// Currency is the ISO 4217 code of Price and Value (CurrencyExponent).
	// "" is read for vouchers made before prices (their price is 0) and
	// stands for the service's default currency (VoucherService.Currency).
	Currency string
	// Subtitle is a short line under the title; Rules the terms of use;
	// ImageURL an absolute http or https URL of the voucher's picture. All
	// optional.
	Subtitle string
	Rules    string
	ImageURL string
}

// Validate reports every rule the voucher breaks as one ErrInvalidArgument
// error whose message names each field and why.
func (v *Voucher) Validate(now time.Time) error {
	var problems []string
	title := strings.TrimSpace(v.Title)
	switch n := utf8.RuneCountInString(v.Title); {
	case !utf8.ValidString(v.Title):
		problems = append(problems, "title: must be valid UTF-8")
	case title == "":
		problems = append(problems, "title: must not be empty or blank")
	case n > MaxTitleLength:
		problems = append(problems, fmt.Sprintf("title: must be at most %d characters, got %d", MaxTitleLength, n))
	case strings.IndexFunc(v.Title, unicode.IsControl) >= 0:
		problems = append(problems, "title: must not contain control characters")
	}
	problems = append(problems, v.validateSale()...)
	if v.Stock < 1 || v.Stock > MaxStock {
		problems = append(problems, fmt.Sprintf("stock: must be between 1 and %d, got %d", MaxStock, v.Stock))
	}
	if v.Shards < 0 || v.Shards > MaxShards {
		problems = append(problems, fmt.Sprintf("shards: must be between 1 and %d, got %d", MaxShards, v.Shards))
	} else if v.Shards > 1 && v.Stock >= 1 && v.Stock < int64(v.Shards) {
		problems = append(problems, fmt.Sprintf("shards: must be at most the stock (%d), got %d", v.Stock, v.Shards))
	}
	if v.PayWithin < 0 || v.PayWithin > MaxPayWithin || v.PayWithin%time.Second != 0 {
		problems = append(problems, fmt.Sprintf("payWithinSeconds: must be whole seconds between 0 and %d, got %v", int64(MaxPayWithin/time.Second), v.PayWithin))
	}
	if v.Price > 0 && v.PayWithin == 0 {
		// Its orders could never be paid (pay needs a deadline), nor their
		// units come back.
		problems = append(problems, fmt.Sprintf("payWithinSeconds: a voucher with a price must give its buyers a deadline to pay (1 to %d), got 0", int64(MaxPayWithin/time.Second)))
	}
	if v.ChallengeLead < 0 || v.ChallengeLead > MaxChallengeLead || v.ChallengeLead%time.Second != 0 {
		problems = append(problems, fmt.Sprintf("challengeLeadSeconds: must be whole seconds between 0 and %d, got %v", int64(MaxChallengeLead/time.Second), v.ChallengeLead))
	}
	switch {
	case v.BeginTime.IsZero():
		problems = append(problems, "beginTime: is required")
	case v.EndTime.IsZero():
		problems = append(problems, "endTime: is required")
	case !v.BeginTime.Before(v.EndTime):
		problems = append(problems, "endTime: must be after beginTime")
	}
	if !v.EndTime.IsZero() && !v.EndTime.After(now) {
		problems = append(problems, "endTime: must be in the future")
	}
	if len(problems) > 0 {
		return Errorf(ErrInvalidArgument, "%s", strings.Join(problems, "; "))
	}
	return nil
}

// validateSale reports what the voucher's price, value, currency and
// description break, as Validate's problems.
func (v *Voucher) validateSale() []string {
	var problems []string
	if v.Price < 0 || v.Price > MaxAmount {
		problems = append(problems, fmt.Sprintf("price: must be between 0 and %d (minor units), got %d", int64(MaxAmount), v.Price))
	}
	switch {
	case v.Value < 0 || v.Value > MaxAmount:
		problems = append(problems, fmt.Sprintf("value: must be between 0 and %d (minor units), got %d", int64(MaxAmount), v.Value))
	case v.Value > 0 && v.Value < v.Price:
		// Most likely the two swapped: a voucher sold for more than it is
		// worth is not a sale. 0 leaves the value unsaid.
		problems = append(problems, fmt.Sprintf("value: must be 0 (not said) or at least the price (%d), got %d", v.Price, v.Value))
	}
	if v.Currency != "" {
		if err := CheckCurrency("currency", v.Currency); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if p := checkText("subtitle", v.Subtitle, MaxSubtitleLength, false); p != "" {
		problems = append(problems, p)
	}
	if p := checkText("rules", v.Rules, MaxRulesLength, true); p != "" {
		problems = append(problems, p)
	}
	if p := checkImageURL(v.ImageURL); p != "" {
		problems = append(problems, p)
	}
	return problems
}

// checkText returns what is wrong with an optional text field (s may be
// empty), or "": valid UTF-8, at most most characters, no control
// characters but, where lines are allowed, line breaks and tabs.
func checkText(field, s string, most int, lines bool) string {
	switch n := utf8.RuneCountInString(s); {
	case !utf8.ValidString(s):
		return field + ": must be valid UTF-8"
	case n > most:
		return fmt.Sprintf("%s: must be at most %d characters, got %d", field, most, n)
	}
	bad := strings.IndexFunc(s, func(r rune) bool {
		return unicode.IsControl(r) && !(lines && (r == '\n' || r == '\r' || r == '\t'))
	})
	if bad >= 0 {
		if lines {
			return field + ": must not contain control characters other than line breaks and tabs"
		}
		return field + ": must not contain control characters"
	}
	return ""
}

// checkImageURL returns what is wrong with an image URL (empty: none), or
// "": an absolute http or https URL with a host, printable ASCII (a
// browser's own encoding of any other character), at most
// MaxImageURLLength bytes.
func checkImageURL(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > MaxImageURLLength {
		return fmt.Sprintf("imageUrl: must be at most %d bytes, got %d", MaxImageURLLength, len(s))
	}
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		return "imageUrl: must be printable ASCII without spaces (percent-encode other characters)"
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Sprintf("imageUrl: must be an absolute http or https URL such as https://example.com/v.png, got %q", truncate(s, 60))
	}
	return ""
}

// VoucherStore keeps vouchers in the database, the source of truth for
// their existence, window and stock.
type VoucherStore interface {
	// CreateVoucher inserts v and sets its ID and CreatedAt.
	CreateVoucher(ctx context.Context, v *Voucher) error
	// Voucher returns the voucher with the id, or ErrVoucherNotFound.
	Voucher(ctx context.Context, id int64) (*Voucher, error)
	// Vouchers returns up to limit vouchers, newest first.
	Vouchers(ctx context.Context, limit int) ([]*Voucher, error)
	// UnendedVouchers returns every voucher whose sale ends after t, oldest
	// first: those that admission may still need.
	UnendedVouchers(ctx context.Context, t time.Time) ([]*Voucher, error)
	// PauseVoucher sets the voucher's Paused and returns it as it is now,
	// or ErrVoucherNotFound. In the sync mode a pause committed is a
	// pause seen: PlaceOrder's guarded update takes no stock of a paused
	// voucher.
	PauseVoucher(ctx context.Context, id int64, paused bool) (*Voucher, error)
	// EndVoucher moves the voucher's EndTime to at, unless it ends earlier
	// already, and returns it as it is now, or ErrVoucherNotFound.
	// PlaceOrder's guarded update takes no stock of a voucher whose end is
	// not after its now. A BeginTime after the new end moves to it: a sale
	// ended before it began has an empty window, and every check of the
	// window (the sync mode's, the challenges', a rebuild's) answers
	// ended, not "not started" until the old start.
	EndVoucher(ctx context.Context, id int64, at time.Time) (*Voucher, error)
	// AddStock grows the voucher's Stock and InitialStock by units, once
	// per key: in one transaction it records (voucher, key, units) under a
	// unique key and adds the units. A key recorded already adds nothing
	// (added false; units is what it added then). A total above MaxStock
	// is ErrInvalidArgument, and adds nothing; an unknown voucher
	// ErrVoucherNotFound.
	AddStock(ctx context.Context, id int64, key string, units int64) (v *Voucher, added bool, recorded int64, err error)
}

// OrderPages reads a voucher's orders (in every status but failed) a page
// at a time: up to limit of them with ids above afterID, by id ascending
// ([OrderStore.VoucherOrders]).
type OrderPages func(ctx context.Context, voucherID, afterID int64, limit int) ([]*Order, error)

// Rebuilt is what redisledger.Cache.Rebuild did.
type Rebuilt struct {
	// Done says the rebuild set the stock; false when the voucher was
	// loaded already (or another rebuild finished first).
	Done bool
	// Remaining is the stock it set.
	Remaining int64
	// Replaced says it deleted state of another generation of the id.
	Replaced bool
}

// CacheState is what the cache holds of a voucher's sale, read at one
// instant: its stock and buyers, and its order stream as the workers'
// group sees it. [Compare] sets it against the database's counts; nothing
// on the admission path decides on it.
type CacheState struct {
	// Loaded says the voucher has a stock; Remaining is that stock, the
	// stock left to admit.
	Loaded    bool
	Remaining int64
	// Buyers counts the buyers recorded.
	Buyers int64
	// Length counts the entries of the order stream: orders not yet
	// delivered, delivered and not acknowledged, and settled but not yet
	// trimmed.
	Length int64
	// Pending counts the entries delivered and not acknowledged.
	Pending int64
	// Lag counts the entries not delivered yet; nil when the cache cannot
	// tell (unknown, not zero). Without the workers' group (the cache lost
	// it) nothing is delivered, and Pending and Lag are zero and nil.
	Lag *int64
	// OldestPending is the longest time a pending entry has gone since it
	// was delivered or its claim refreshed: above the claim lease, no live
	// worker holds it. Zero when none is pending.
	OldestPending time.Duration
	// Consumers are the workers' group's consumers.
	Consumers []StreamConsumer
	// PendingOrders are the order ids of the pending entries listed (the
	// first 10,000): orders that the database may hold already, committed
	// and not yet acknowledged, or not. Malformed entries, and entries
	// settled while they were read, are left out.
	PendingOrders []int64
	// Unlisted counts the pending entries beyond those listed.
	Unlisted int64
	// Bounded says the read stopped at its bounds (more pending entries
	// than it lists, or more undelivered ones than it counts when the
	// cache cannot tell the lag): the counts above are then an estimate.
	Bounded bool
	// DeadLetters counts the entries of the dead-letter stream.
	DeadLetters int64
	// Node is the address of the Redis master that holds the voucher: one
	// voucher's admissions all run there (on a Cluster, the master of its
	// slot); "" when unknown, and for a sharded voucher, whose shards each
	// name theirs.
	Node string
	// Shards are a sharded voucher's shards, by index, each read at one
	// instant of its own; nil for an unsharded voucher. The figures above
	// are then their sums (Loaded: every shard is; Lag: nil if any is;
	// OldestPending: the largest; Consumers: merged by name), which leave
	// out the stock in transfer between shards: reconcile counts the
	// shards at one instant instead.
	Shards []ShardState
}

// ShardState is what the cache holds of one shard of a sharded voucher,
// read at one instant (CacheState.Shards).
type ShardState struct {
	Index int
	// Tag is the shard's hash tag (Voucher.ShardTag).
	Tag string
	// Node is the address of the Redis master that holds the shard, from
	// the Cluster's slot map of the last few seconds (a shard moved by
	// resharding shows its new master); "" when unknown.
	Node string
	// Loaded says the shard has a stock; Remaining is that stock.
	Loaded    bool
	Remaining int64
	// Buyers counts the buyers recorded here: those whose home shard
	// (HomeShard) this is.
	Buyers int64
	// Length, Pending, Lag and DeadLetters are the shard's order stream's
	// and dead-letter stream's, as in CacheState.
	Length, Pending int64
	Lag             *int64
	DeadLetters     int64
	// TransfersOut counts the transfers of stock out of this shard that
	// are not settled yet, and TransferredOut the units they took: in
	// flight to another shard, or received there and not yet settled here.
	TransfersOut, TransferredOut int64
}

// StreamConsumer is one consumer (an instance's workers) of a voucher's
// order stream.
type StreamConsumer struct {
	Name string
	// Pending counts the entries delivered to it and not acknowledged.
	Pending int64
	// Idle is the time since it last read or claimed; an instance whose
	// workers run reads every few seconds.
	Idle time.Duration
}

// VoucherView is a voucher as clients see it: the database's record and the
// stock left in the ledger, which is what buyers compete for.
type VoucherView struct {
	*Voucher
	// Remaining is the stock the ledger has left to sell; nil when the
	// ledger does not hold the voucher now (Redis lost it: it is rebuilt).
	Remaining *int64
}

// VoucherService holds the rules for creating, reading and controlling
// vouchers: their rows in the database, and their sale in the Ledger.
type VoucherService struct {
	Store interface {
		VoucherStore
		OrderCounter
		VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*Order, error)
	}
	// Ledger holds the vouchers' sales: it loads a voucher created, says
	// what remains of each, and applies the operator's controls.
	Ledger VoucherLedger
	// Placer chooses the hash tags of a sharded voucher's shards at its
	// creation (Voucher.ShardTags), before its row is inserted: so that on
	// a Redis Cluster the shards land on distinct masters. The tags are
	// made from the voucher's generation, not its id, which is not known
	// yet. Nil, or a placement that returns no tags (off a Cluster): the
	// default tags (DefaultShardTag).
	Placer interface {
		PlaceShards(ctx context.Context, generation int64, shards int) ([]string, error)
	}
	Logger *slog.Logger
	// Clock tells the time; tests set it.
	Clock Clock
	// Created, if set, is told of each voucher created, once it is on sale
	// (the workers start reading its orders).
	Created func(v *Voucher)
	// Retention is how long after its sale ends a voucher is kept: listed
	// among the open ones (its orders may still be pending), its keys kept
	// in the cache. Default DefaultRetention.
	Retention time.Duration
	// ListFor is how long List keeps the rows it read (per limit): every
	// visitor of the sale page polls the list, and a crowd of visitors
	// must not become a crowd of database queries. The remaining stock is
	// read afresh each time; a voucher created here is listed at once,
	// elsewhere within ListFor. Default 1s; negative reads every time.
	ListFor time.Duration
	// Currency is the currency of a voucher created without one, and of
	// the vouchers made before prices (Voucher.Currency ""). Default
	// DefaultCurrency.
	Currency string

	// lists holds the rows List read, by limit, and lister makes the
	// lists of one limit that miss wait for one read.
	listMu sync.Mutex
	lists  map[int]listedRows
	// listGen counts forgetLists: a read that began before one is not kept.
	listGen uint64
	lister  singleflight.Group
	// rows holds vouchers as first read, for admission.
	rows voucherRows

	openMu   sync.Mutex
	openIDs  []int64
	openRead time.Time
}

// DefaultRetention is the default retention of a voucher after its sale
// ends: how long its orders may still be on their way to the database, and
// its keys are kept in the cache (VoucherService.Retention).
const DefaultRetention = 24 * time.Hour

// RetentionOrDefault is Retention, or DefaultRetention if not set.
func (s *VoucherService) RetentionOrDefault() time.Duration {
	return orDefault(s.Retention, DefaultRetention)
}

// orDefault returns d, or def if d is not positive.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// OpenVoucherIDs returns the ids of the vouchers whose sale has not ended
// or ended within the retention: those whose orders may still be pending.
// The list is read from the database at most once a second.
func (s *VoucherService) OpenVoucherIDs(ctx context.Context) ([]int64, error) {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	now := s.Clock.Now()
	if !s.openRead.IsZero() && now.Sub(s.openRead) < time.Second && now.After(s.openRead) {
		return s.openIDs, nil
	}
	vs, err := s.Open(ctx)
	if err != nil {
		return nil, fmt.Errorf("list open vouchers: %w", err)
	}
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	s.openIDs, s.openRead = ids, now
	return ids, nil
}

// Open reads the vouchers on sale or ended within the retention from the
// database, oldest first, and keeps their rows for admission.
func (s *VoucherService) Open(ctx context.Context) ([]*Voucher, error) {
	vs, err := s.Store.UnendedVouchers(ctx, s.Clock.Now().Add(-orDefault(s.Retention, DefaultRetention)))
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		s.rows.remember(v)
	}
	return vs, nil
}

// Create validates v, places its shards (Placer), stores it, and puts it
// on sale in the ledger (Ledger.Load). When the ledger cannot be reached
// the voucher still exists in the database: Create returns
// ErrUnavailable, and the ledger loads it at the next start
// (Ledger.Restore). A voucher has at most the ledger's MaxShards shards.
func (s *VoucherService) Create(ctx context.Context, v *Voucher) (*VoucherView, error) {
	if err := v.Validate(s.Clock.Now()); err != nil {
		return nil, err
	}
	if most, why := s.Ledger.MaxShards(); v.Shards > most {
		return nil, Errorf(ErrInvalidArgument, "shards: must be at most %d here, got %d: %s", most, v.Shards, why)
	}
	v.Title = strings.TrimSpace(v.Title)
	v.Subtitle = strings.TrimSpace(v.Subtitle)
	v.Currency = s.currencyOf(v)
	v.InitialStock = v.Stock
	v.Generation = newGeneration()
	v.ShardTags = nil
	if v.Shards > 1 && s.Placer != nil {
		tags, err := s.Placer.PlaceShards(ctx, v.Generation, v.Shards)
		// No tags: placement has nothing to choose (not a Cluster), and the
		// default tags serve.
		if err == nil && tags != nil && len(tags) != v.Shards {
			err = fmt.Errorf("placement gave %d tags for %d shards", len(tags), v.Shards)
		}
		if err != nil {
			// Nothing is stored yet: the client may simply try again.
			s.Logger.Error("voucher's shards not placed", "shards", v.Shards, "err", err)
			return nil, &Error{Kind: ErrUnavailable, Message: fmt.Sprintf("the %d shards of the voucher could not be placed in the cache; nothing was created", v.Shards), RetryAfter: time.Second}
		}
		v.ShardTags = tags
	}
	if err := s.Store.CreateVoucher(ctx, v); err != nil {
		return nil, fmt.Errorf("create voucher: %w", err)
	}
	s.rows.remember(v)
	if err := s.Ledger.Load(ctx, v); err != nil {
		s.Logger.Error("voucher saved but not loaded into the ledger", "voucher", v.ID, "err", err)
		return nil, &Error{Kind: ErrUnavailable, Message: fmt.Sprintf("voucher %d was saved but its stock could not be loaded; it will be loaded when the service restarts", v.ID), RetryAfter: time.Second}
	}
	// On sale: the new voucher is open, and those who need to are told.
	s.openMu.Lock()
	s.openRead = time.Time{}
	s.openMu.Unlock()
	s.forgetLists()
	if s.Created != nil {
		s.Created(v)
	}
	// A buyer may have rebuilt the voucher and bought before the load, which
	// then kept what they did: say what the ledger holds.
	views, err := s.withRemaining(ctx, []*Voucher{v})
	if err != nil || views[0].Remaining == nil {
		remaining := v.Stock
		return &VoucherView{Voucher: v, Remaining: &remaining}, nil
	}
	return views[0], nil
}

// Get returns the voucher with the id and its cached remaining stock.
func (s *VoucherService) Get(ctx context.Context, id int64) (*VoucherView, error) {
	v, err := s.Store.Voucher(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get voucher %d: %w", id, err)
	}
	views, err := s.withRemaining(ctx, []*Voucher{v})
	if err != nil {
		return nil, err
	}
	return views[0], nil
}

// List returns up to limit vouchers, newest first, with their remaining
// stock: the rows as read at most ListFor ago, the stock as it is now.
func (s *VoucherService) List(ctx context.Context, limit int) ([]*VoucherView, error) {
	read := s.listRows
	if left, err := s.Ledger.Remaining(ctx); err == nil && left == nil {
		// The rows are the sale (the SQL ledger): kept, they would lag the
		// sales and the controls; one read of them is all a list takes.
		read = s.Store.Vouchers
	}
	vs, err := read(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("list vouchers: %w", err)
	}
	return s.withRemaining(ctx, vs)
}

// listedRows are vouchers' rows as List read them, and when.
type listedRows struct {
	rows []*Voucher
	read time.Time
}

// listRows returns up to limit vouchers' rows, newest first, read at most
// ListFor ago. The rows are shared: callers do not change them.
func (s *VoucherService) listRows(ctx context.Context, limit int) ([]*Voucher, error) {
	keep := orDefault(s.ListFor, time.Second)
	if s.ListFor < 0 {
		return s.Store.Vouchers(ctx, limit)
	}
	s.listMu.Lock()
	l, ok := s.lists[limit]
	gen := s.listGen
	s.listMu.Unlock()
	if ok && s.Clock.Now().Sub(l.read) < keep {
		return l.rows, nil
	}
	// Keyed by the generation too: a List after a control here joins no
	// read begun before it (found by review).
	rows, err, _ := s.lister.Do(strconv.Itoa(limit)+"/"+strconv.FormatUint(gen, 10), func() (any, error) {
		// Read by another caller since this one looked?
		s.listMu.Lock()
		l, ok := s.lists[limit]
		s.listMu.Unlock()
		if ok && s.Clock.Now().Sub(l.read) < keep {
			return l.rows, nil
		}
		read := s.Clock.Now()
		// Shared by every caller that joins it: not ended by the first
		// caller going away (found by review: the others answered 500).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		rows, err := s.Store.Vouchers(rctx, limit)
		if err != nil {
			return nil, err
		}
		s.listMu.Lock()
		// Kept only if nothing was created or changed here meanwhile: a
		// read begun before a pause must not be kept after it.
		if s.listGen == gen {
			if s.lists == nil || len(s.lists) >= maxKeptLists {
				s.lists = map[int]listedRows{}
			}
			s.lists[limit] = listedRows{rows: rows, read: read}
		}
		s.listMu.Unlock()
		return rows, nil
	})
	if err != nil {
		return nil, err
	}
	return rows.([]*Voucher), nil
}

// forgetLists drops the rows List keeps: a voucher was created or changed
// here, and this instance lists it at once.
func (s *VoucherService) forgetLists() {
	s.listMu.Lock()
	clear(s.lists)
	s.listGen++
	s.listMu.Unlock()
}

// maxKeptLists bounds the lists kept, by limit: a client asking for every
// limit from 1 to 1,000 must not make the instance keep a thousand lists.
const maxKeptLists = 8

// withRemaining returns the views of vs with what remains of each, as
// the ledger holds it now; where the rows are the sale (a nil map from
// the ledger), each row's stock.
func (s *VoucherService) withRemaining(ctx context.Context, vs []*Voucher) ([]*VoucherView, error) {
	remaining, err := s.Ledger.Remaining(ctx, vs...)
	if err != nil {
		return nil, fmt.Errorf("read remaining stock: %w", err)
	}
	return viewsOf(vs, remaining, s.CurrencyOrDefault()), nil
}

// CurrencyOrDefault is Currency, or DefaultCurrency if not set (or s is
// nil).
func (s *VoucherService) CurrencyOrDefault() string {
	if s == nil || s.Currency == "" {
		return DefaultCurrency
	}
	return s.Currency
}

// currencyOf returns v's currency: its own, or the service's default.
func (s *VoucherService) currencyOf(v *Voucher) string {
	if v.Currency != "" {
		return v.Currency
	}
	return s.CurrencyOrDefault()
}

// viewsOf returns the views of vs with what remains of each as the ledger
// said (Ledger.Remaining): a nil map, each row's stock. A voucher made
// before prices is shown in currency, on a copy: the rows may be shared.
func viewsOf(vs []*Voucher, remaining map[int64]int64, currency string) []*VoucherView {
	views := make([]*VoucherView, len(vs))
	for i, v := range vs {
		if v.Currency == "" {
			c := *v
			c.Currency = currency
			v = &c
		}
		views[i] = &VoucherView{Voucher: v}
		if remaining == nil {
			views[i].Remaining = &v.Stock
		} else if n, ok := remaining[v.ID]; ok {
			views[i].Remaining = &n
		}
	}
	return views
}

// Row returns the voucher's row as first read in this process (see
// voucherRows): its generation and shards, without asking the database on
// the hot path.
func (s *VoucherService) Row(ctx context.Context, id int64) (*Voucher, error) {
	return s.rows.get(ctx, s.Store, id)
}

// Remember keeps v as the voucher's row for Row: a rebuild read it anew.
func (s *VoucherService) Remember(v *Voucher) { s.rows.remember(v) }

// voucherRows holds vouchers as first read in this process: their
// generation and shards, which never change (their stock does, and an
// operator's controls change the end, the pause and the initial stock: no
// admission decides on those from here, but the end of a voucher the cache
// lost, which only spares a rebuild). Admission takes the generation from
// it without asking the database on the hot path, even while the database
// is down. A rebuild, and a control in this process, refreshes its
// voucher's row.
type voucherRows struct {
	rows  sync.Map // id → *Voucher
	reads singleflight.Group
}

// get returns the voucher's row, read from store the first time.
func (r *voucherRows) get(ctx context.Context, store VoucherStore, id int64) (*Voucher, error) {
	if v, ok := r.rows.Load(id); ok {
		return v.(*Voucher), nil
	}
	v, err, _ := r.reads.Do(strconv.FormatInt(id, 10), func() (any, error) {
		// Shared by every caller: not bound to the first one's request.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		v, err := store.Voucher(rctx, id)
		if err != nil {
			return nil, err
		}
		r.remember(v)
		return v, nil
	})
	if err != nil {
		return nil, fmt.Errorf("voucher %d: %w", id, err)
	}
	return v.(*Voucher), nil
}

// remember keeps a copy of v's row (not the caller's).
func (r *voucherRows) remember(v *Voucher) {
	c := *v
	r.rows.Store(v.ID, &c)
}

// newGeneration returns a random generation, never 0 (the generation of
// vouchers made before generations existed).
func newGeneration() int64 {
	for {
		var b [8]byte
		rand.Read(b[:])
		if g := int64(binary.BigEndian.Uint64(b[:]) >> 1); g != 0 {
			return g
		}
	}
}
