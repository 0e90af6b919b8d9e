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

var _ StatsSource = seckill.StatsSource(nil)

// statsJSON is GET /api/admin/stats's answer: a seckill.Stats.
type statsJSON struct {
	Time       time.Time             `json:"time"`
	Vouchers   []voucherStatsJSON    `json:"vouchers"`
	Admissions []admissionSecondJSON `json:"admissions"`
	Workers    workerStatsJSON       `json:"workers"`
}

type voucherStatsJSON struct {
	ID           int64  `json:"id,string"`
	Title        string `json:"title"`
	Stock        int64  `json:"stock"`
	InitialStock int64  `json:"initialStock"`
	// Remaining is null when Redis does not hold the voucher.
	Remaining *int64          `json:"remaining"`
	Created   int64           `json:"created"`
	Failed    int64           `json:"failed"`
	Pending   int64           `json:"pending"`
	Drift     int64           `json:"drift"`
	BeginTime time.Time       `json:"beginTime"`
	EndTime   time.Time       `json:"endTime"`
	Stream    streamStatsJSON `json:"stream"`
	// RedisNode is the Redis master holding the voucher; "" when unknown.
	RedisNode string `json:"redisNode"`
}

type streamStatsJSON struct {
	Length  int64 `json:"length"`
	Pending int64 `json:"pending"`
	// Lag is null when Redis cannot tell it.
	Lag                  *int64  `json:"lag"`
	OldestPendingSeconds float64 `json:"oldestPendingSeconds"`
	Consumers            int64   `json:"consumers"`
	DeadLetters          int64   `json:"deadLetters"`
}

type admissionSecondJSON struct {
	Time   time.Time        `json:"time"`
	Counts map[string]int64 `json:"counts"`
}

type workerStatsJSON struct {
	Consumer string `json:"consumer"`
	Mode     string `json:"mode"`
	Busy     int    `json:"busy"`
	Allowed  int    `json:"allowed"`
	Breaker  string `json:"breaker"`
}

func newStatsJSON(st *seckill.Stats) statsJSON {
	out := statsJSON{
		Time:       st.Time.UTC(),
		Vouchers:   make([]voucherStatsJSON, 0, len(st.Vouchers)),
		Admissions: make([]admissionSecondJSON, 0, len(st.Admissions)),
		Workers: workerStatsJSON{
			Consumer: st.Workers.Consumer,
			Mode:     string(st.Workers.Mode),
			Busy:     st.Workers.Busy,
			Allowed:  st.Workers.Allowed,
			Breaker:  st.Workers.Breaker,
		},
	}
	for _, vs := range st.Vouchers {
		v := vs.Voucher
		out.Vouchers = append(out.Vouchers, voucherStatsJSON{
			ID:           v.ID,
			Title:        v.Title,
			Stock:        v.Stock,
			InitialStock: v.InitialStock,
			Remaining:    vs.Remaining,
			Created:      vs.Created,
			Failed:       vs.Failed,
			Pending:      vs.Pending,
			Drift:        vs.Drift,
			BeginTime:    v.BeginTime.UTC(),
			EndTime:      v.EndTime.UTC(),
			RedisNode:    vs.RedisNode,
			Stream: streamStatsJSON{
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
		out.Admissions = append(out.Admissions, admissionSecondJSON{Time: a.Time.UTC(), Counts: counts})
	}
	return out
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
	writeJSON(w, http.StatusOK, newStatsJSON(st))
}
