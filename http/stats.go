package http

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// StatsSource is what the stats route calls: the same as
// seckill.StatsSource, which monitor.Monitor is.
type StatsSource interface {
	Stats(ctx context.Context) (*seckill.Stats, error)
}

// StatsJSON is GET /api/admin/stats's answer: a seckill.Stats as the API
// shows it. `seckill stats --url` reads it back with Stats.
type StatsJSON struct {
	Time       time.Time             `json:"time"`
	Vouchers   []VoucherStatsJSON    `json:"vouchers"`
	Admissions []AdmissionSecondJSON `json:"admissions"`
	Workers    WorkerStatsJSON       `json:"workers"`
}

// VoucherStatsJSON is a seckill.VoucherStats in StatsJSON.
type VoucherStatsJSON struct {
	ID           int64  `json:"id,string"`
	Title        string `json:"title"`
	Stock        int64  `json:"stock"`
	InitialStock int64  `json:"initialStock"`
	// Remaining is null when Redis does not hold the voucher.
	Remaining *int64 `json:"remaining"`
	Created   int64  `json:"created"`
	Failed    int64  `json:"failed"`
	Pending   int64  `json:"pending"`
	Drift     int64  `json:"drift"`
	// AwaitingPayment, Paid, Cancelled and Returned are the orders' lives
	// after admission, of a voucher with a deadline; 0 without one.
	AwaitingPayment int64     `json:"awaitingPayment"`
	Paid            int64     `json:"paid"`
	Cancelled       int64     `json:"cancelled"`
	Returned        int64     `json:"returned"`
	BeginTime       time.Time `json:"beginTime"`
	EndTime         time.Time `json:"endTime"`
	// Paused says an operator paused the sale.
	Paused bool `json:"paused"`
	// Price is in Currency's minor units; PriceText in its units, as
	// "12.50 CNY".
	Price     int64  `json:"price"`
	Currency  string `json:"currency"`
	PriceText string `json:"priceText"`
	// Revenue is what the paid orders took: paid × the price, which is
	// fixed at the voucher's creation and owed by each of its orders.
	Revenue     int64           `json:"revenue"`
	RevenueText string          `json:"revenueText"`
	Stream      StreamStatsJSON `json:"stream"`
	// RedisNode is the Redis master holding the voucher; "" when unknown,
	// and for a sharded voucher, whose shards each name theirs.
	RedisNode string `json:"redisNode"`
	// Shards is how many shards the voucher has: 1 when unsharded.
	Shards int `json:"shards"`
	// ShardStats are a sharded voucher's shards, by index; absent for an
	// unsharded voucher, and in the sync mode.
	ShardStats []ShardStatsJSON `json:"shardStats,omitempty"`
}

// ShardStatsJSON is a seckill.ShardState in VoucherStatsJSON: one shard of
// a sharded voucher.
type ShardStatsJSON struct {
	Index int    `json:"index"`
	Tag   string `json:"tag"`
	// RedisNode is the Redis master holding the shard; "" when unknown.
	RedisNode string `json:"redisNode"`
	// Remaining is the shard's stock; null when Redis does not hold it.
	Remaining *int64 `json:"remaining"`
	Buyers    int64  `json:"buyers"`
	Length    int64  `json:"length"`
	Pending   int64  `json:"pending"`
	// Lag is null when Redis cannot tell it.
	Lag         *int64 `json:"lag"`
	DeadLetters int64  `json:"deadLetters"`
	// TransfersOut counts the transfers of stock out of the shard not yet
	// settled; TransferredOut the units they took.
	TransfersOut   int64 `json:"transfersOut"`
	TransferredOut int64 `json:"transferredOut"`
}

// StreamStatsJSON is a seckill.StreamStats in StatsJSON.
type StreamStatsJSON struct {
	Length  int64 `json:"length"`
	Pending int64 `json:"pending"`
	// Lag is null when Redis cannot tell it.
	Lag                  *int64  `json:"lag"`
	OldestPendingSeconds float64 `json:"oldestPendingSeconds"`
	Consumers            int64   `json:"consumers"`
	DeadLetters          int64   `json:"deadLetters"`
}

// AdmissionSecondJSON is a seckill.AdmissionSecond in StatsJSON.
type AdmissionSecondJSON struct {
	Time   time.Time        `json:"time"`
	Counts map[string]int64 `json:"counts"`
}

// WorkerStatsJSON is a seckill.WorkerStats in StatsJSON.
type WorkerStatsJSON struct {
	Consumer string `json:"consumer"`
	Mode     string `json:"mode"`
	Busy     int    `json:"busy"`
	Allowed  int    `json:"allowed"`
	Breaker  string `json:"breaker"`
}

// NewStatsJSON returns st as the API shows it, its times in UTC.
func NewStatsJSON(st *seckill.Stats) StatsJSON {
	out := StatsJSON{
		Time:       st.Time.UTC(),
		Vouchers:   make([]VoucherStatsJSON, 0, len(st.Vouchers)),
		Admissions: make([]AdmissionSecondJSON, 0, len(st.Admissions)),
		Workers: WorkerStatsJSON{
			Consumer: st.Workers.Consumer,
			Mode:     string(st.Workers.Mode),
			Busy:     st.Workers.Busy,
			Allowed:  st.Workers.Allowed,
			Breaker:  st.Workers.Breaker,
		},
	}
	for _, vs := range st.Vouchers {
		v := vs.Voucher
		out.Vouchers = append(out.Vouchers, VoucherStatsJSON{
			ID:              v.ID,
			Title:           v.Title,
			Stock:           v.Stock,
			InitialStock:    v.InitialStock,
			Remaining:       vs.Remaining,
			Created:         vs.Created,
			Failed:          vs.Failed,
			Pending:         vs.Pending,
			Drift:           vs.Drift,
			AwaitingPayment: vs.AwaitingPayment,
			Paid:            vs.Paid,
			Cancelled:       vs.Cancelled,
			Returned:        vs.Returned,
			BeginTime:       v.BeginTime.UTC(),
			EndTime:         v.EndTime.UTC(),
			Paused:          v.Paused,
			Price:           v.Price,
			Currency:        v.Currency,
			PriceText:       seckill.FormatMoney(v.Price, v.Currency),
			Revenue:         vs.Revenue(),
			RevenueText:     seckill.FormatMoney(vs.Revenue(), v.Currency),
			RedisNode:       vs.RedisNode,
			Shards:          v.ShardCount(),
			ShardStats:      newShardStatsJSON(vs.Shards),
			Stream: StreamStatsJSON{
				Length:               vs.Stream.Length,
				Pending:              vs.Stream.Pending,
				Lag:                  vs.Stream.Lag,
				OldestPendingSeconds: vs.Stream.OldestAge.Seconds(),
				Consumers:            vs.Stream.Consumers,
				DeadLetters:          vs.Stream.DeadLetters,
			},
		})
	}
	for _, a := range st.Admissions {
		counts := a.Counts
		if counts == nil {
			counts = map[string]int64{}
		}
		out.Admissions = append(out.Admissions, AdmissionSecondJSON{Time: a.Time.UTC(), Counts: counts})
	}
	return out
}

// newShardStatsJSON returns shards as the API shows them; nil for none.
func newShardStatsJSON(shards []seckill.ShardState) []ShardStatsJSON {
	if len(shards) == 0 {
		return nil
	}
	out := make([]ShardStatsJSON, len(shards))
	for i, sh := range shards {
		out[i] = ShardStatsJSON{Index: sh.Index, Tag: sh.Tag, RedisNode: sh.Node, Buyers: sh.Buyers,
			Length: sh.Length, Pending: sh.Pending, Lag: sh.Lag, DeadLetters: sh.DeadLetters,
			TransfersOut: sh.TransfersOut, TransferredOut: sh.TransferredOut}
		if sh.Loaded {
			out[i].Remaining = &sh.Remaining
		}
	}
	return out
}

// Stats returns the snapshot j shows: the seckill.Stats it was made of,
// with the fields the API leaves out (a voucher's creation time and
// generation) zero.
func (j *StatsJSON) Stats() *seckill.Stats {
	st := &seckill.Stats{Time: j.Time, Workers: seckill.WorkerStats{
		Consumer: j.Workers.Consumer, Mode: seckill.Mode(j.Workers.Mode), Busy: j.Workers.Busy, Allowed: j.Workers.Allowed, Breaker: j.Workers.Breaker,
	}}
	for _, v := range j.Vouchers {
		var shards []seckill.ShardState
		for _, sh := range v.ShardStats {
			shards = append(shards, seckill.ShardState{Index: sh.Index, Tag: sh.Tag, Node: sh.RedisNode,
				Loaded: sh.Remaining != nil, Remaining: deref(sh.Remaining), Buyers: sh.Buyers,
				Length: sh.Length, Pending: sh.Pending, Lag: sh.Lag, DeadLetters: sh.DeadLetters,
				TransfersOut: sh.TransfersOut, TransferredOut: sh.TransferredOut})
		}
		st.Vouchers = append(st.Vouchers, seckill.VoucherStats{
			Voucher: &seckill.Voucher{ID: v.ID, Title: v.Title, Stock: v.Stock, InitialStock: v.InitialStock, BeginTime: v.BeginTime, EndTime: v.EndTime, Paused: v.Paused,
				Shards: v.Shards, Price: v.Price, Currency: v.Currency},
			Shards:    shards,
			Remaining: v.Remaining, Created: v.Created, Failed: v.Failed, Pending: v.Pending, Drift: v.Drift, RedisNode: v.RedisNode,
			AwaitingPayment: v.AwaitingPayment, Paid: v.Paid, Cancelled: v.Cancelled, Returned: v.Returned,
			Stream: seckill.StreamStats{
				Length: v.Stream.Length, Pending: v.Stream.Pending, Lag: v.Stream.Lag,
				OldestAge: time.Duration(v.Stream.OldestPendingSeconds * float64(time.Second)), Consumers: v.Stream.Consumers, DeadLetters: v.Stream.DeadLetters,
			},
		})
	}
	for _, a := range j.Admissions {
		st.Admissions = append(st.Admissions, seckill.AdmissionSecond{Time: a.Time, Counts: a.Counts})
	}
	return st
}

// deref returns *p, or 0 for nil.
func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// stats takes a snapshot of the sale from the stats source, with this
// server's admissions per second when the source has none: the admissions
// are counted here, in the requests.
func (s *Server) stats(ctx context.Context) (*seckill.Stats, error) {
	if s.ops.stats == nil {
		return nil, seckill.Errorf(seckill.ErrUnavailable, "stats are not available on this server")
	}
	st, err := s.ops.stats.Stats(ctx)
	if err != nil {
		// Redis or the database did not answer in time: the client may
		// try again; the cause is logged, not shown.
		return nil, fmt.Errorf("%w: %w", &seckill.Error{Kind: seckill.ErrUnavailable, Message: "the stats cannot be read now; try again", RetryAfter: time.Second}, err)
	}
	if st.Admissions == nil {
		withAdmissions := *st // the source's snapshot may be shared
		withAdmissions.Admissions = s.admissions.seconds()
		st = &withAdmissions
	}
	return st, nil
}

func (s *Server) adminStats(w http.ResponseWriter, r *http.Request, _ auth.Identity) {
	st, err := s.stats(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewStatsJSON(st))
}
