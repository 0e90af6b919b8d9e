package http

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// ChallengeService issues the proof-of-work challenges of the vouchers
// that take one and checks the buys' solutions;
// *seckill.ChallengeService is one.
type ChallengeService interface {
	// Issue makes a challenge for the buyer and the voucher.
	Issue(ctx context.Context, userID, voucherID int64) (seckill.Challenge, error)
	// Check lets a buy go on (nil) or answers it: a voucher without a
	// challenge goes on at once; one with a challenge needs header (the
	// X-Altcha header) to carry a fresh solution of the buyer's, and
	// spends it.
	Check(ctx context.Context, userID, voucherID int64, header string) error
	// Stats are its counts, for metrics.
	Stats() seckill.ChallengeStats
}

var _ ChallengeService = (*seckill.ChallengeService)(nil)

// solutionHeader is the header a buy carries its solution in: ALTCHA's
// payload, base64 JSON.
const solutionHeader = "X-Altcha"

// getChallenge serves GET /api/vouchers/{id}/challenge: a challenge for
// the buyer, never cached (each is the buyer's own, and spent once).
func (s *Server) getChallenge(w http.ResponseWriter, r *http.Request, who auth.Identity) {
	w.Header().Set("Cache-Control", "no-store")
	if s.challenges == nil {
		s.error(w, r, seckill.Errorf(seckill.ErrChallengeNotNeeded, "this service issues no challenges: buy without one"))
		return
	}
	voucherID, err := parseID("voucher id", r.PathValue("id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	ch, err := s.challenges.Issue(r.Context(), who.UserID, voucherID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ch)
}

// registerChallengeMetrics registers the challenges' metrics on reg, read
// from the service's counts at each scrape.
func registerChallengeMetrics(reg *prometheus.Registry, c ChallengeService) error {
	checks := func(result string, read func(seckill.ChallengeStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "seckill_challenge_checks_total",
			Help:        "Checks of the solutions of buys of vouchers that take a challenge, by result: passed, required (none carried), invalid, unavailable.",
			ConstLabels: prometheus.Labels{"result": result},
		}, func() float64 { return float64(read(c.Stats())) })
	}
	for _, m := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "seckill_challenges_issued_total",
			Help: "Challenges issued (GET /api/vouchers/{id}/challenge).",
		}, func() float64 { return float64(c.Stats().Issued) }),
		checks("passed", func(st seckill.ChallengeStats) int64 { return st.Passed }),
		checks("required", func(st seckill.ChallengeStats) int64 { return st.Required }),
		checks("invalid", func(st seckill.ChallengeStats) int64 { return st.Invalid }),
		checks("unavailable", func(st seckill.ChallengeStats) int64 { return st.Unavailable }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "seckill_challenge_maxnumber",
			Help: "The highest maxnumber of any voucher's challenges now: the work asked of a buyer, raised by load (one series, not one per voucher).",
		}, func() float64 { return float64(c.Stats().MaxNumber) }),
	} {
		if err := reg.Register(m); err != nil {
			return err
		}
	}
	return nil
}
