package seckill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

// ErrChallengeNotNeeded says a challenge was asked for a voucher that
// takes none: its buys carry no solution.
var ErrChallengeNotNeeded = errors.New("challenge not needed")

// ChallengeSpender marks solved challenges used, once each, in the cache
// (redis.Client).
type ChallengeSpender interface {
	// SpendChallenge marks the challenge (its lowercase hex hash) of the
	// buyer's buy of v used for ttl, where the buyer is admitted, and
	// reports whether it was fresh: of concurrent presentations of one
	// challenge, exactly one gets true.
	SpendChallenge(ctx context.Context, v *Voucher, userID int64, challenge string, ttl time.Duration) (fresh bool, err error)
}

// ChallengeAnswers is what a ChallengeService asks of the ledger
// (ChallengeService.Answers).
type ChallengeAnswers interface {
	SoldOutAnswers
	HeldOrder(ctx context.Context, userID, voucherID int64) (Held, error)
}

// ChallengeConfig configures a ChallengeService. Zero fields take the
// defaults named in their comments.
type ChallengeConfig struct {
	// TTL is how long a challenge stays valid after the later of its
	// issue and its voucher's BeginTime: time to solve it and buy, not to
	// stockpile it. Default 2m.
	TTL time.Duration
	// MinNumber is the maxnumber of a voucher's challenges at rest: the
	// work asked of every buyer, about MinNumber/2 hashes on average.
	// Default DefaultChallengeMinNumber.
	MinNumber int64
	// MaxNumber bounds the maxnumber that load raises it to, at most
	// MaxChallengeNumber. Default DefaultChallengeMaxNumber.
	MaxNumber int64
	// Rate is how many distinct buyers a second may ask here for a
	// voucher's challenges or present its solutions before its difficulty
	// doubles each second: buyers, not requests, so that one buyer's
	// requests count once. Default DefaultChallengeRate; negative: the
	// rate never raises it.
	Rate float64
}

// The defaults of ChallengeConfig.
//
// A phone's browser solving as the ALTCHA widget does (WebCrypto, one
// digest a number) is slow: ALTCHA's documentation times maxnumber 100,000
// at 0.83 s on an iPhone 12 mini and 2.5 s on a Samsung Galaxy A14, some
// 120,000 and 40,000 hashes a second. DefaultChallengeMaxNumber is then
// about a second at worst on a mid-range phone (half that on average), and
// DefaultChallengeMinNumber a tenth of it. Go's SHA-256 (SolveChallenge, a
// bot's way) does some 4 million a second on one core of the machine the
// figures were taken on (BenchmarkSolveChallenge): the work prices a bot's
// buy at milliseconds, not seconds (docs/design/challenge.md, The front door: the challenge).
const (
	DefaultChallengeTTL       = 2 * time.Minute
	DefaultChallengeMinNumber = 10_000
	DefaultChallengeMaxNumber = 100_000
	DefaultChallengeRate      = 1000
)

func (c ChallengeConfig) withDefaults() ChallengeConfig {
	if c.TTL <= 0 {
		c.TTL = DefaultChallengeTTL
	}
	if c.MinNumber <= 0 {
		c.MinNumber = DefaultChallengeMinNumber
	}
	if c.MaxNumber <= 0 {
		c.MaxNumber = DefaultChallengeMaxNumber
	}
	c.MaxNumber = min(c.MaxNumber, MaxChallengeNumber)
	c.MinNumber = min(c.MinNumber, c.MaxNumber)
	if c.Rate == 0 {
		c.Rate = DefaultChallengeRate
	}
	return c
}

// ChallengeService issues the proof-of-work challenges of the vouchers
// that take one (Voucher.Challenge) and checks the solutions their buys
// carry (docs/design/challenge.md, The front door: the challenge): each bound by its
// signed salt to one buyer, one voucher and an expiry, and spent once.
type ChallengeService struct {
	Config ChallengeConfig
	// Key signs the challenges (ChallengeKey): every instance must share it.
	Key []byte
	// Vouchers gives the vouchers' rows, kept in memory (as admission's):
	// a voucher without a challenge costs one map lookup.
	Vouchers *VoucherService
	// Answers, if set, answers a buyer from the ledger without an
	// admission: of a voucher it knows sold out, before any solution is
	// asked for, and after the end, with the buyer's order. Nil with the
	// SQL ledger (the sync mode), which keeps no buyers apart from the
	// database: every buy goes on to its admission.
	Answers ChallengeAnswers
	// Spent spends each solution once.
	Spent ChallengeSpender
	// Backlog, if set, tells when a voucher's order backlog is above its
	// high-water mark (the stream mode's workers, worker.Pool): its
	// difficulty then rises (Difficulty).
	Backlog Backlog
	Logger  *slog.Logger
	// Clock tells the time. Default time.Now.
	Clock Clock
	// Rand draws the challenges' salts and numbers. Default crypto/rand.
	Rand io.Reader

	// Difficulty holds each voucher's maxnumber, raised by load; its
	// worker (Start, Stop) moves it every second.
	Difficulty Difficulty

	stats challengeStats
}

// challengeStats are a ChallengeService's counts since it started.
type challengeStats struct {
	issued, passed, required, invalid, unavailable atomic.Int64
}

// ChallengeStats are a ChallengeService's counts since it started, for
// metrics.
type ChallengeStats struct {
	// Issued counts challenges issued.
	Issued int64
	// The checks of buys of vouchers that take a challenge, by result:
	// Passed (the solution spent, the buy goes on), Required (none
	// carried), Invalid (forged, malformed, expired, another buyer's or
	// voucher's, used), Unavailable (the cache could not spend it). A buy
	// answered before any solution is asked for (sold out, outside its
	// window) is none of them.
	Passed, Required, Invalid, Unavailable int64
	// MaxNumber is the highest maxnumber of any voucher now.
	MaxNumber int64
}

// Stats returns the service's counts.
func (s *ChallengeService) Stats() ChallengeStats {
	return ChallengeStats{
		Issued:      s.stats.issued.Load(),
		Passed:      s.stats.passed.Load(),
		Required:    s.stats.required.Load(),
		Invalid:     s.stats.invalid.Load(),
		Unavailable: s.stats.unavailable.Load(),
		MaxNumber:   s.Difficulty.Highest(s.Config.withDefaults()),
	}
}

// row returns the voucher's row, from memory once read.
func (s *ChallengeService) row(ctx context.Context, voucherID int64) (*Voucher, error) {
	v, err := s.Vouchers.Row(ctx, voucherID)
	if err != nil {
		if errors.Is(err, ErrVoucherNotFound) {
			return nil, err
		}
		s.Logger.Warn("challenge: the voucher could not be read from the database", "voucher", voucherID, "err", err)
		return nil, &Error{Kind: ErrUnavailable, Message: "the sale cannot be read right now; try again", RetryAfter: time.Second}
	}
	return v, nil
}

// Issue makes a challenge for the buyer and the voucher, from the
// voucher's ChallengeLead before its sale begins until it ends; it expires
// TTL after the later of now and the start. A voucher that takes no
// challenge is ErrChallengeNotNeeded; before its lead, ErrNotStarted with
// RetryAfter; after its end, ErrEnded (or the buyer's order,
// ErrDuplicateOrder, unless only a buy may confirm it: Orders.Confirmed);
// one known sold out, ErrSoldOut (or the buyer's order, likewise); one
// that does not exist, ErrVoucherNotFound.
func (s *ChallengeService) Issue(ctx context.Context, userID, voucherID int64) (Challenge, error) {
	v, err := s.row(ctx, voucherID)
	if err != nil {
		return Challenge{}, err
	}
	if !v.Challenge {
		return Challenge{}, Errorf(ErrChallengeNotNeeded, "voucher %d takes no challenge: buy without one", voucherID)
	}
	now := s.Clock.Now()
	if from := v.BeginTime.Add(-v.ChallengeLead); now.Before(from) {
		return Challenge{}, &Error{Kind: ErrNotStarted, RetryAfter: from.Sub(now),
			Message: fmt.Sprintf("challenges for voucher %d are issued from %s", voucherID, from.UTC().Format(time.RFC3339))}
	}
	if !now.Before(v.EndTime) {
		// A buyer who holds an order is told it, as a buy would tell them.
		if h, err := s.heldOrder(ctx, v, userID); err != nil {
			return Challenge{}, err
		} else if h.OrderID != 0 && !h.Unconfirmed {
			return Challenge{}, duplicate(h.OrderID)
		}
		return Challenge{}, Errorf(ErrEnded, "the sale of voucher %d has ended", voucherID)
	}
	if !now.Before(v.BeginTime) {
		// A voucher sold out has nothing to solve for: the buyer is told
		// so, or given their order, at once.
		if err := s.soldOut(ctx, v, userID, true); err != nil {
			return Challenge{}, err
		}
	}
	cfg := s.Config.withDefaults()
	s.Difficulty.hit(voucherID, userID, cfg)
	expires := now
	if v.BeginTime.After(now) {
		expires = v.BeginTime
	}
	ch, err := NewChallenge(s.Key, ChallengeClaims{UserID: userID, VoucherID: voucherID, Expires: expires.Add(cfg.TTL)},
		s.Difficulty.Number(voucherID, cfg), s.Rand)
	if err != nil {
		return Challenge{}, fmt.Errorf("issue a challenge for voucher %d: %w", voucherID, err)
	}
	s.stats.issued.Add(1)
	return ch, nil
}

// Check lets the buyer's buy of the voucher go on, or answers it. A
// voucher that takes no challenge goes on at once, whatever header says:
// it costs one lookup of its row in memory. A buy of one that does is
// answered first without a solution where the answer is cheap: before
// its sale (ErrNotStarted); after it (ErrEnded, but a buyer who holds an
// order goes on, to be answered it as on a voucher without a challenge:
// ended); and when the buy path knows it sold out (ErrSoldOut; or the
// buyer's order, ErrDuplicateOrder, read in the same read). Then header
// (X-Altcha) must carry a solution of a challenge issued for this buyer
// and this voucher, not expired, which is spent here, once
// (ChallengeSpender): none is ErrChallengeRequired; any other failure,
// ErrChallengeInvalid; the cache unreachable, ErrUnavailable. A solution
// is spent before the admission runs, whatever it answers: a buy that
// fails after it needs a new one.
func (s *ChallengeService) Check(ctx context.Context, userID, voucherID int64, header string) error {
	v, err := s.row(ctx, voucherID)
	if err != nil {
		return err
	}
	if !v.Challenge {
		return nil
	}
	now := s.Clock.Now()
	if now.Before(v.BeginTime) {
		return &Error{Kind: ErrNotStarted, RetryAfter: v.BeginTime.Sub(now), Message: fmt.Sprintf("the sale of voucher %d has not started", voucherID)}
	}
	if !now.Before(v.EndTime) {
		return s.ended(ctx, v, userID)
	}
	if err := s.soldOut(ctx, v, userID, header == ""); err != nil {
		return err
	}
	s.Difficulty.hit(voucherID, userID, s.Config.withDefaults())
	sol, err := ParseSolution(header)
	if err == nil {
		err = s.spend(ctx, v, userID, sol, now)
	}
	switch {
	case err == nil:
		s.stats.passed.Add(1)
	case errors.Is(err, ErrChallengeRequired):
		s.stats.required.Add(1)
	case errors.Is(err, ErrChallengeInvalid):
		s.stats.invalid.Add(1)
	default:
		s.stats.unavailable.Add(1)
	}
	return err
}

// soldOut answers a buyer of a voucher the ledger knows sold out, as its
// buy would (SoldOutAnswers); nil when it does not know, or cannot vouch.
// probe: the buy carries no solution, and would never reach an admission
// that renews the memory.
func (s *ChallengeService) soldOut(ctx context.Context, v *Voucher, userID int64, probe bool) error {
	if s.Answers == nil {
		return nil
	}
	return s.Answers.AnswerSoldOut(ctx, v, userID, probe)
}

// ended answers a buy of the voucher v after its end: a buyer who holds
// an order is told of it (ErrDuplicateOrder), as a voucher without a
// challenge tells them; the others are told ErrEnded. The holder is
// answered here, not by an admission: their order may be cancelled before
// one runs, and the admission reads the cache's clock, which may be
// behind this one, so it would sell them a unit again with nothing
// solved. Where only an admission confirms an order
// (--redis-wait-replicas) the holder goes on to one (nil) unless the
// voucher lets a cancelled buyer buy again (then ErrEnded): without it a
// cancelled holder's admission answers the cancelled order. In the sync
// mode (no Orders) every buy goes on: its transaction reads the window on
// this clock, and answers a holder their order before it.
func (s *ChallengeService) ended(ctx context.Context, v *Voucher, userID int64) error {
	if s.Answers == nil {
		return nil
	}
	h, err := s.heldOrder(ctx, v, userID)
	switch {
	case err != nil:
		return err
	case h.OrderID != 0 && !h.Unconfirmed:
		return duplicate(h.OrderID)
	case h.OrderID != 0 && !v.RebuyAfterCancel:
		return nil
	}
	return Errorf(ErrEnded, "the sale of voucher %d has ended", v.ID)
}

// heldOrder returns the order the buyer holds of the voucher v as the
// ledger records it (none without Answers: the sync mode), or
// ErrUnavailable.
func (s *ChallengeService) heldOrder(ctx context.Context, v *Voucher, userID int64) (Held, error) {
	if s.Answers == nil {
		return Held{}, nil
	}
	h, err := s.Answers.HeldOrder(ctx, userID, v.ID)
	if err != nil {
		s.Logger.Warn("challenge: a buyer's order could not be read after the end", "voucher", v.ID, "err", err)
		return Held{}, &Error{Kind: ErrUnavailable, Message: "cannot read your order right now; try again", RetryAfter: time.Second}
	}
	return h, nil
}

// spentMargin is how long a spent solution's mark outlives its expiry on
// the spending instance's clock: the skew between instances' clocks it
// covers.
const spentMargin = time.Minute

// spend verifies the solution for the buyer and the voucher v at now, and
// spends it.
func (s *ChallengeService) spend(ctx context.Context, v *Voucher, userID int64, sol Solution, now time.Time) error {
	claims, err := VerifySolution(s.Key, sol, now)
	if err != nil {
		return err
	}
	if claims.UserID != userID || claims.VoucherID != v.ID {
		return Errorf(ErrChallengeInvalid, "challenge solution was issued for another buyer or voucher: get your own")
	}
	// The key lives until the challenge expires, and a minute after: an
	// instance whose clock is behind this one's still finds the solution
	// unexpired after that, and must find it spent (found by review: with
	// a second, a clock 30 s behind let it pass twice). G-level: the
	// instances' clocks agree within a minute.
	ttl := claims.Expires.Sub(now) + spentMargin
	fresh, err := s.Spent.SpendChallenge(ctx, v, userID, strings.ToLower(sol.Challenge), ttl)
	if err != nil {
		s.Logger.Warn("challenge: a solution could not be spent", "voucher", v.ID, "err", err)
		return &Error{Kind: ErrUnavailable, Message: "your solution could not be checked right now; try again (with a new challenge, if it is then refused as used)", RetryAfter: time.Second}
	}
	if !fresh {
		return Errorf(ErrChallengeInvalid, "challenge solution was used already: get a new challenge")
	}
	return nil
}

// Start starts the difficulty's worker, which steps it every second; Stop
// stops it.
func (s *ChallengeService) Start(ctx context.Context) error {
	s.Difficulty.start(ctx, s.Config.withDefaults(), s.Backlog, s.Logger)
	return nil
}

// Stop stops the difficulty's worker and waits for it. Safe to call twice.
func (s *ChallengeService) Stop() { s.Difficulty.stop() }
