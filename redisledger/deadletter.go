package redisledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/redis"
)

// DeadLetterCache is the cache side of the dead-letter tools: the
// dead-letter streams, and the buyers' slots a discard reads.
type DeadLetterCache interface {
	// DeadLetters returns the dead letters of the vouchers, of every
	// shard, each voucher's oldest first.
	DeadLetters(ctx context.Context, voucherIDs ...int64) ([]seckill.DeadLetterRecord, error)
	// RemoveDeadLetters deletes entries of the shard's dead-letter stream
	// and returns how many it held.
	RemoveDeadLetters(ctx context.Context, s seckill.Shard, entryIDs ...string) (int64, error)
	// BuyerOrder returns the user's order id in the voucher if the cache
	// records one, else 0.
	BuyerOrder(ctx context.Context, userID, voucherID int64) (int64, error)
}

var _ DeadLetterCache = (*redis.Client)(nil)

// DeadLetterService lists and settles dead letters: the order messages the
// workers could not persist, whose orders are failed. It implements
// [seckill.DeadLetterAdmin].
type DeadLetterService struct {
	// Mode is how the service takes orders, named when a retry is refused
	// for want of an Admitter.
	Mode  seckill.Mode
	Cache DeadLetterCache
	Store interface {
		FailOrder(ctx context.Context, o *seckill.Order) error
	}
	// Vouchers tells which vouchers to look at.
	Vouchers *seckill.VoucherService
	// Admitter runs a retry's admission as a buy's, with its recoveries.
	// A retry appends the order to its voucher's stream, which only the
	// stream mode's workers read: nil in the other modes, where a retry is
	// refused.
	Admitter seckill.Readmitter
	Logger   *slog.Logger
	// seckill.Clock tells the time. Default time.Now.
	Clock seckill.Clock
	// OrderTime returns the time an order id was made (orderid.Time); if
	// nil, a retried order's CreatedAt is the time of the retry.
	OrderTime func(id int64) time.Time
}

// DeadLetters returns the dead letters of the vouchers on sale or ended
// within the retention, oldest first.
func (s *DeadLetterService) DeadLetters(ctx context.Context) ([]seckill.DeadLetterEntry, error) {
	recs, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	// The same order may be dead-lettered twice (re-admitted by a retry
	// whose removal of the first dead letter failed, then failed again):
	// its id then cannot name one dead letter, and each is named by entry.
	perOrder := make(map[int64]int, len(recs))
	for _, r := range recs {
		perOrder[r.OrderID]++
	}
	out := make([]seckill.DeadLetterEntry, len(recs))
	for i, r := range recs {
		id := r.ID()
		if r.OrderID > 0 && perOrder[r.OrderID] == 1 {
			id = strconv.FormatInt(r.OrderID, 10)
		}
		out[i] = seckill.DeadLetterEntry{ID: id, DeadLetterRecord: r}
	}
	return out, nil
}

// open returns the dead letters of the open vouchers, oldest first.
func (s *DeadLetterService) open(ctx context.Context) ([]seckill.DeadLetterRecord, error) {
	ids, err := s.Vouchers.OpenVoucherIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	recs, err := s.Cache.DeadLetters(ctx, ids...)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	// Stable: each shard's entries are in stream order already, which
	// breaks ties within a millisecond.
	slices.SortStableFunc(recs, func(a, b seckill.DeadLetterRecord) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.VoucherID, b.VoucherID), cmp.Compare(a.Shard, b.Shard))
	})
	return recs, nil
}

// RetryDeadLetter admits the dead letter's order again, with its own id,
// through the admission script: the order is appended to its voucher's
// stream, the workers persist it, and it reads created (created wins over
// its failed row). On success the dead letter is removed. A refusal leaves
// the order failed and the dead letter in place.
//
// A retry whose dead letter could not be removed afterwards can be made
// again: the buyer's slot then holds this very order, which counts as
// admitted, so an order is never admitted twice.
func (s *DeadLetterService) RetryDeadLetter(ctx context.Context, id string, adminID int64) (*seckill.Order, error) {
	rec, err := s.find(ctx, id)
	if err != nil {
		s.Logger.Info("dead letter retry refused", "admin", adminID, "dead_letter", id, "outcome", "not_found", "err", err)
		return nil, err
	}
	log := s.Logger.With("admin", adminID, "dead_letter", id, "voucher", rec.VoucherID, "order", rec.OrderID,
		"user", rec.UserID, "reason", rec.Reason)
	if rec.OrderID <= 0 || rec.UserID <= 0 {
		log.Info("dead letter retry refused", "outcome", "malformed")
		return nil, seckill.Errorf(seckill.ErrInvalidArgument, "dead letter %s has no order id or no buyer, so it cannot be admitted again; discard it", id)
	}
	if s.Admitter == nil {
		log.Info("dead letter retry refused", "outcome", "not_stream_mode", "mode", s.Mode)
		return nil, seckill.Errorf(seckill.ErrInvalidArgument, "dead letters are retried into the order stream, which only the stream mode's workers read; this service runs in %s mode", s.Mode)
	}
	// Admitted as a buy is (Readmit): a voucher the cache lost is rebuilt
	// first, and an admission whose answer was lost is answered from the
	// buyer's slot.
	err = s.Admitter.Readmit(ctx, &seckill.Order{ID: rec.OrderID, UserID: rec.UserID, VoucherID: rec.VoucherID})
	var de *seckill.Error
	switch {
	case err == nil:
	case errors.Is(err, seckill.ErrDuplicateOrder) && errors.As(err, &de) && de.OrderID == rec.OrderID:
		// Admitted already: by an earlier retry whose removal of the dead
		// letter failed, or by one running now.
		log.Info("dead letter's order was admitted again already", "outcome", "already_admitted")
	case errors.Is(err, seckill.ErrUnavailable):
		log.Info("dead letter retry failed", "outcome", "unknown", "err", err)
		return nil, &seckill.Error{Kind: seckill.ErrUnavailable, RetryAfter: time.Second,
			Message: fmt.Sprintf("whether order %d was admitted again is not known; retry again (it is never admitted twice)", rec.OrderID)}
	case errors.As(err, &de):
		refused := refusal(de, rec)
		log.Info("dead letter retry refused", "outcome", "refused", "err", refused)
		return nil, refused
	default:
		log.Info("dead letter retry failed", "outcome", "error", "err", err)
		return nil, fmt.Errorf("retry order %d: %w", rec.OrderID, err)
	}
	n, err := s.Cache.RemoveDeadLetters(ctx, seckill.Shard{VoucherID: rec.VoucherID, Index: rec.Shard}, rec.EntryID)
	if err != nil {
		log.Warn("dead letter's order admitted again, but the dead letter could not be removed", "outcome", "admitted_not_removed", "err", err)
		return nil, &seckill.Error{Kind: seckill.ErrUnavailable, RetryAfter: time.Second,
			Message: fmt.Sprintf("order %d was admitted again, but its dead letter could not be removed; retry again to remove it (the order is not admitted twice)", rec.OrderID)}
	}
	if n == 0 {
		// Discarded at the same moment: the order is admitted all the same.
		log.Warn("dead letter's order admitted again; the dead letter was already gone (discarded at the same time?)", "outcome", "admitted")
	} else {
		log.Info("dead letter's order admitted again; the workers will persist it", "outcome", "admitted")
	}
	created := s.Clock.Now()
	if s.OrderTime != nil {
		created = s.OrderTime(rec.OrderID)
	}
	return &seckill.Order{ID: rec.OrderID, UserID: rec.UserID, VoucherID: rec.VoucherID, Status: seckill.OrderPending, CreatedAt: created}, nil
}

// refusal rewrites an admission's refusal (sold out, ended, not started,
// the buyer's other order) for the admin who asked: which order, and that
// nothing changed. The kind, and the buyer's other order for
// seckill.ErrDuplicateOrder, stay.
func refusal(de *seckill.Error, rec *seckill.DeadLetterRecord) error {
	msg := de.Message
	if errors.Is(de, seckill.ErrDuplicateOrder) {
		msg = fmt.Sprintf("user %d already has order %d of voucher %d", rec.UserID, de.OrderID, rec.VoucherID)
	}
	return &seckill.Error{Kind: de.Kind, OrderID: de.OrderID, RetryAfter: de.RetryAfter,
		Message: fmt.Sprintf("%s: order %d stays failed and its dead letter stays", msg, rec.OrderID)}
}

// DiscardDeadLetter removes the dead letter. Its order stays failed: it is
// recorded failed first if the database somehow lacks it, so that it never
// vanishes without a status.
func (s *DeadLetterService) DiscardDeadLetter(ctx context.Context, id string, adminID int64) error {
	rec, err := s.find(ctx, id)
	if err != nil {
		s.Logger.Info("dead letter discard refused", "admin", adminID, "dead_letter", id, "outcome", "not_found", "err", err)
		return err
	}
	log := s.Logger.With("admin", adminID, "dead_letter", id, "voucher", rec.VoucherID, "order", rec.OrderID,
		"user", rec.UserID, "reason", rec.Reason)
	readmitted := false
	if rec.OrderID > 0 && rec.UserID > 0 {
		o := &seckill.Order{ID: rec.OrderID, UserID: rec.UserID, VoucherID: rec.VoucherID, Status: seckill.OrderFailed, Reason: rec.Reason}
		if err := s.Store.FailOrder(ctx, o); err != nil {
			log.Info("dead letter discard failed", "outcome", "error", "err", err)
			return fmt.Errorf("discard dead letter %s: %w", id, err)
		}
		// A retry whose removal of the dead letter failed left the order
		// admitted again: it is not failed, and the log must not say so.
		held, err := s.Cache.BuyerOrder(ctx, rec.UserID, rec.VoucherID)
		if err != nil {
			log.Info("dead letter discard failed", "outcome", "error", "err", err)
			return fmt.Errorf("discard dead letter %s: %w", id, err)
		}
		readmitted = held == rec.OrderID
	}
	n, err := s.Cache.RemoveDeadLetters(ctx, seckill.Shard{VoucherID: rec.VoucherID, Index: rec.Shard}, rec.EntryID)
	switch {
	case err != nil:
		log.Info("dead letter discard failed", "outcome", "error", "err", err)
		return fmt.Errorf("discard dead letter %s: %w", id, err)
	case n == 0:
		log.Info("dead letter discard refused", "outcome", "not_found")
		return seckill.Errorf(seckill.ErrDeadLetterNotFound, "dead letter %s not found", id)
	case readmitted:
		log.Info("dead letter discarded; its order had been admitted again by a retry and goes on", "outcome", "discarded_readmitted")
	case rec.OrderID > 0 && rec.UserID > 0:
		log.Info("dead letter discarded; its order stays failed", "outcome", "discarded")
	default:
		log.Info("dead letter discarded", "outcome", "discarded")
	}
	return nil
}

// find returns the dead letter named id: an order id, among the dead
// letters of the open vouchers, or "<voucher id>[.<shard>]:<entry id>".
func (s *DeadLetterService) find(ctx context.Context, id string) (*seckill.DeadLetterRecord, error) {
	orderID, shard, entryID, err := seckill.ParseDeadLetterID(id)
	if err != nil {
		return nil, err
	}
	var recs []seckill.DeadLetterRecord
	if orderID > 0 {
		recs, err = s.open(ctx)
	} else {
		recs, err = s.Cache.DeadLetters(ctx, shard.VoucherID)
	}
	if err != nil {
		return nil, err
	}
	var found []seckill.DeadLetterRecord
	for _, r := range recs {
		if (orderID > 0 && r.OrderID == orderID) || (orderID == 0 && (seckill.Shard{VoucherID: r.VoucherID, Index: r.Shard}) == shard && r.EntryID == entryID) {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		return nil, seckill.Errorf(seckill.ErrDeadLetterNotFound, "dead letter %s not found", id)
	case 1:
		return &found[0], nil
	}
	names := make([]string, len(found))
	for i, r := range found {
		names[i] = r.ID()
	}
	return nil, seckill.Errorf(seckill.ErrInvalidArgument, "order %d has %d dead letters; name one of them: %s", orderID, len(found), strings.Join(names, ", "))
}
