package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	if v.Stock < 1 || v.Stock > MaxStock {
		problems = append(problems, fmt.Sprintf("stock: must be between 1 and %d, got %d", MaxStock, v.Stock))
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
}

// VoucherCache is the copy of a voucher's stock and sale window that
// admission reads in Redis.
type VoucherCache interface {
	// LoadVoucher puts a voucher just created into the cache: its stock
	// and window. Anything the cache held under its id is stale and is
	// replaced; LoadVoucher reports whether there was such state.
	LoadVoucher(ctx context.Context, v *Voucher) (replaced bool, err error)
	// Remaining returns the cached stock left for each of ids; an id whose
	// voucher is not loaded is absent from the map.
	Remaining(ctx context.Context, ids ...int64) (map[int64]int64, error)
	// StageBuyers records buyers (user → order id) of a voucher that is
	// being rebuilt, while it has no stock in the cache. It reports false
	// once the voucher has a stock again: someone else finished the rebuild.
	StageBuyers(ctx context.Context, voucherID int64, orders []*Order) (bool, error)
	// FinishRebuild completes a rebuild: it adds the buyers of the orders
	// still queued, writes the window and sets the stock to the initial
	// stock less the buyers, unless the voucher has a stock already. It
	// reports whether it set the stock, and to what.
	FinishRebuild(ctx context.Context, v *Voucher) (bool, int64, error)
	// State reads what the cache holds of a voucher.
	State(ctx context.Context, voucherID int64) (*CacheState, error)
	// Unload deletes a voucher's stock and buyers from the cache, so that it
	// is rebuilt; admission refuses it until then.
	Unload(ctx context.Context, voucherID int64) error
}

// CacheState is what the cache holds of a voucher.
type CacheState struct {
	Loaded    bool  // it has a stock
	Remaining int64 // the stock left to admit
	Buyers    int64 // buyers recorded
	// Queued are the messages in the voucher's order stream: admitted
	// orders, maybe not yet persisted, maybe persisted and not yet trimmed.
	Queued []OrderMessage
	// Pending counts messages delivered and not acknowledged, Undelivered
	// those not read yet, DeadLetters those in the dead-letter stream.
	Pending, Undelivered, DeadLetters int64
}

// VoucherView is a voucher as clients see it: the database's record and the
// stock left in the cache, which is what buyers compete for.
type VoucherView struct {
	*Voucher
	// Remaining is the cached stock left; nil when the voucher is not loaded
	// in the cache.
	Remaining *int64
}

// VoucherService holds the rules for creating and reading vouchers across
// the database and the cache.
type VoucherService struct {
	Store interface {
		VoucherStore
		OrderCounter
		VoucherOrders(ctx context.Context, voucherID, afterID int64, limit int) ([]*Order, error)
	}
	Cache  VoucherCache
	Logger *slog.Logger
	// Now returns the current time; tests replace it.
	Now func() time.Time
	// Created, if set, is told of each voucher created, once it is on sale
	// (the workers start reading its orders).
	Created func(v *Voucher)
	// DatabaseOnly keeps vouchers out of the cache: the sync mode, where the
	// database's stock is what remains.
	DatabaseOnly bool

	rebuilds singleflight.Group

	openMu   sync.Mutex
	openIDs  []int64
	openRead time.Time
}

// Recent is how long after its sale ends a voucher may still have orders
// on their way to the database: OpenIDs keeps it that long.
const Recent = 24 * time.Hour

// OpenIDs returns the ids of the vouchers whose sale has not ended or ended
// within Recent: those whose orders may still be pending. The list is read
// from the database at most once a second.
func (s *VoucherService) OpenIDs(ctx context.Context) ([]int64, error) {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	now := s.Now()
	if !s.openRead.IsZero() && now.Sub(s.openRead) < time.Second && now.After(s.openRead) {
		return s.openIDs, nil
	}
	vs, err := s.Store.UnendedVouchers(ctx, now.Add(-Recent))
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

// Create validates v, stores it, and loads its stock into the cache. When
// the cache cannot be reached the voucher still exists in the database:
// Create returns ErrUnavailable, and [VoucherService.Restore] loads it at the
// next start.
func (s *VoucherService) Create(ctx context.Context, v *Voucher) (*VoucherView, error) {
	if err := v.Validate(s.Now()); err != nil {
		return nil, err
	}
	v.Title = strings.TrimSpace(v.Title)
	v.InitialStock = v.Stock
	if err := s.Store.CreateVoucher(ctx, v); err != nil {
		return nil, fmt.Errorf("create voucher: %w", err)
	}
	if s.DatabaseOnly {
		s.created(v)
		return &VoucherView{Voucher: v, Remaining: &v.Stock}, nil
	}
	if _, err := s.Cache.LoadVoucher(ctx, v); err != nil {
		s.Logger.Error("voucher saved but not loaded into the cache", "voucher", v.ID, "err", err)
		return nil, &Error{Kind: ErrUnavailable, Message: fmt.Sprintf("voucher %d was saved but its stock could not be loaded; it will be loaded when the service restarts", v.ID), RetryAfter: time.Second}
	}
	s.created(v)
	remaining := v.Stock
	return &VoucherView{Voucher: v, Remaining: &remaining}, nil
}

// created tells who needs it of a voucher on sale.
func (s *VoucherService) created(v *Voucher) {
	s.openMu.Lock()
	s.openRead = time.Time{} // the new voucher is open
	s.openMu.Unlock()
	if s.Created != nil {
		s.Created(v)
	}
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

// List returns up to limit vouchers, newest first, with their remaining stock.
func (s *VoucherService) List(ctx context.Context, limit int) ([]*VoucherView, error) {
	vs, err := s.Store.Vouchers(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("list vouchers: %w", err)
	}
	return s.withRemaining(ctx, vs)
}

func (s *VoucherService) withRemaining(ctx context.Context, vs []*Voucher) ([]*VoucherView, error) {
	if s.DatabaseOnly {
		views := make([]*VoucherView, len(vs))
		for i, v := range vs {
			views[i] = &VoucherView{Voucher: v, Remaining: &v.Stock}
		}
		return views, nil
	}
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	remaining, err := s.Cache.Remaining(ctx, ids...)
	if err != nil {
		return nil, fmt.Errorf("read remaining stock: %w", err)
	}
	views := make([]*VoucherView, len(vs))
	for i, v := range vs {
		views[i] = &VoucherView{Voucher: v}
		if n, ok := remaining[v.ID]; ok {
			views[i].Remaining = &n
		}
	}
	return views, nil
}

// Restore rebuilds in the cache every voucher still on sale whose stock the
// cache has lost, so that a Redis that restarted empty sells on exactly
// where the database and the queued orders say the sale stands (G6).
func (s *VoucherService) Restore(ctx context.Context) error {
	if s.DatabaseOnly {
		return nil
	}
	vs, err := s.Store.UnendedVouchers(ctx, s.Now())
	if err != nil {
		return fmt.Errorf("restore vouchers: %w", err)
	}
	views, err := s.withRemaining(ctx, vs)
	if err != nil {
		return fmt.Errorf("restore vouchers: %w", err)
	}
	var errs []error
	for _, view := range views {
		if view.Remaining != nil {
			continue
		}
		if err := s.rebuild(ctx, view.Voucher); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rebuildPage is how many buyers a rebuild reads from the database and
// writes to the cache at a time.
const rebuildPage = 5000

// Rebuild puts the voucher back in the cache from the database: its window,
// its buyers (its created orders, and the orders still queued), and the
// stock they leave. It does nothing to a voucher the cache holds, so
// concurrent rebuilds, here or in other instances, are harmless. Calls for
// one voucher in this process share one rebuild.
func (s *VoucherService) Rebuild(ctx context.Context, id int64) error {
	_, err, _ := s.rebuilds.Do(strconv.FormatInt(id, 10), func() (any, error) {
		v, err := s.Store.Voucher(ctx, id)
		if err != nil {
			return nil, err
		}
		return nil, s.rebuild(ctx, v)
	})
	return err
}

func (s *VoucherService) rebuild(ctx context.Context, v *Voucher) error {
	var after int64
	for {
		page, err := s.Store.VoucherOrders(ctx, v.ID, after, rebuildPage)
		if err != nil {
			return fmt.Errorf("rebuild voucher %d: %w", v.ID, err)
		}
		if len(page) == 0 {
			break
		}
		staging, err := s.Cache.StageBuyers(ctx, v.ID, page)
		if err != nil {
			return fmt.Errorf("rebuild voucher %d: %w", v.ID, err)
		}
		if !staging || len(page) < rebuildPage {
			break
		}
		after = page[len(page)-1].ID
	}
	set, left, err := s.Cache.FinishRebuild(ctx, v)
	if err != nil {
		return fmt.Errorf("rebuild voucher %d: %w", v.ID, err)
	}
	if set {
		s.Logger.Warn("voucher rebuilt in Redis from the database", "voucher", v.ID, "remaining", left, "initial_stock", v.InitialStock)
	}
	return nil
}
