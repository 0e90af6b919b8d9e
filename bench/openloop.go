package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// openLoop sends requests at a constant arrival rate, as wrk2 and k6's
// constant-arrival-rate executor do: request i is due at start + i/rate,
// whatever happened to the ones before it, and its latency is measured
// from that intended time. A sender that falls behind does not skip a
// request: it sends it late, and the lateness is in its latency. So a
// server that stalls shows the stall in every request due meanwhile, not
// only in the few a closed loop had in flight.
type openLoop struct {
	rate float64 // requests a second
	n    int64   // requests to send
	// inflight is how many requests may be in flight at once (one sender
	// each, one keep-alive connection each).
	inflight int
	// deadline ends the sending this long after the start: requests not
	// sent by then are dropped and counted. Default: twice the schedule,
	// plus a second.
	deadline time.Duration
}

// openStats is what an open loop's sending did.
type openStats struct {
	start time.Time
	// sent is how many requests were sent; late, how many of them were
	// due while no sender was free, and were sent when one came free;
	// dropped, how many were never sent: the deadline passed first.
	sent, late, dropped int64
	// lag is the most a request was sent after its time.
	lag time.Duration
	// elapsed is from the start until the last answer.
	elapsed time.Duration
}

// job is one request of an open loop.
type job struct {
	i   int64
	due time.Time
}

// run sends the requests: send(ctx, i) sends request i and returns when
// it is answered; record gets each request's latency from its due time.
func (o openLoop) run(ctx context.Context, send func(ctx context.Context, i int64) error,
	record func(i int64, latency time.Duration, err error)) openStats {
	if o.deadline <= 0 {
		o.deadline = 2*time.Duration(float64(o.n)/o.rate*float64(time.Second)) + time.Second
	}
	jobs := make(chan job) // unbuffered: a send succeeds only to an idle sender
	var wg, ready sync.WaitGroup
	for range max(o.inflight, 1) {
		ready.Add(1)
		wg.Go(func() {
			ready.Done()
			for j := range jobs {
				err := send(ctx, j.i)
				record(j.i, time.Since(j.due), err)
			}
		})
	}
	ready.Wait() // the senders are started before the clock is
	st := openStats{start: time.Now()}
	stop := time.NewTimer(o.deadline)
	defer stop.Stop()
	interval := float64(time.Second) / o.rate
	wait := time.NewTimer(0)
	<-wait.C
	var freed time.Time // when a sender last came free after none was
sending:
	for i := int64(0); i < o.n; i++ {
		due := st.start.Add(time.Duration(float64(i) * interval))
		if d := time.Until(due); d > 0 {
			wait.Reset(d)
			select {
			case <-wait.C:
			case <-ctx.Done():
				st.dropped = o.n - i
				break sending
			}
		}
		j := job{i: i, due: due}
		select {
		case jobs <- j:
			if due.Before(freed) { // due while the senders were all busy
				st.late++
			}
		default:
			st.late++
			select {
			case jobs <- j:
				freed = time.Now()
			case <-stop.C:
				st.dropped = o.n - i
				break sending
			case <-ctx.Done():
				st.dropped = o.n - i
				break sending
			}
		}
		st.sent++
		st.lag = max(st.lag, time.Since(due))
	}
	close(jobs)
	wg.Wait()
	st.elapsed = time.Since(st.start)
	return st
}

// OpenLoop is the open-loop part of a run: requests sent at a constant
// arrival rate to the server's buy route and, at the same rates, to the
// bare handler, each latency measured from the request's intended send
// time.
type OpenLoop struct {
	// Path says what the server was sent.
	Path string `json:"path"`
	// MaxRate is the admissions' closed-loop maximum (requests ÷ whole wall
	// time, same client and connections), measured in this run when the
	// steps are fractions of it; 0 with a fixed rate.
	// That measurement is the phase "admissions max" of Report.Phases.
	MaxRate float64 `json:"maxClosedLoopReqPerSec,omitempty"`
	// Seconds is how long each step's schedule lasts.
	Seconds float64    `json:"secondsPerStep"`
	Steps   []OpenStep `json:"steps"`
}

// OpenStep is one arrival rate, sent to the server and to the bare handler.
type OpenStep struct {
	// Percent is the rate as a percentage of MaxRate (0 with a fixed
	// rate); Rate is the intended arrival rate, requests a second.
	Percent float64    `json:"percentOfMax,omitempty"`
	Rate    float64    `json:"targetReqPerSec"`
	Server  OpenResult `json:"server"`
	Bare    OpenResult `json:"bare"`
	// TargetMet, at 80% of the maximum, says whether the server's p99 was
	// at most twice the bare handler's at the same rate.
	TargetMet *bool `json:"p99AtMost2xBare,omitempty"`
}

// OpenResult is one open-loop phase. Latencies are from each request's
// intended send time.
type OpenResult struct {
	// Voucher is the voucher bought (the server's phases): a fresh one,
	// with a stock of Scheduled and the warm-up's requests.
	Voucher   int64 `json:"voucherId,omitempty"`
	Scheduled int64 `json:"scheduled"`
	Sent      int64 `json:"sent"`
	// Late were sent after their time, no connection being free when they
	// were due; Dropped were never sent, the phase's deadline passing
	// first. LagMax is the most a request was sent after its time.
	Late    int64         `json:"late"`
	Dropped int64         `json:"dropped"`
	LagMax  time.Duration `json:"lagMaxNs"`
	// Errors are requests with no answer, of which ConnRefused and
	// ConnReset were refused and reset connections.
	Errors      int64            `json:"errors"`
	ConnRefused int64            `json:"connRefused"`
	ConnReset   int64            `json:"connReset"`
	Answers     map[string]int64 `json:"answers"`
	// Drain is how long after the phase the database took to hold its
	// admitted orders (the server's phases); the next phase waits for it.
	Drain time.Duration `json:"drainNs,omitempty"`
	// Rate is the answers over the phase's whole wall time.
	Rate    float64       `json:"reqPerSec"`
	Seconds float64       `json:"seconds"`
	P50     time.Duration `json:"p50Ns"`
	P99     time.Duration `json:"p99Ns"`
	P999    time.Duration `json:"p999Ns"`
	Max     time.Duration `json:"maxNs"`
	CPU     []CPU         `json:"cpu,omitempty"`
}

// openPath says what the server is sent in the open loop.
const openPath = "admissions: each step buys a fresh voucher whose stock is the step's requests, one buyer per request, so every request is admitted"

// openLoop runs the open-loop steps: with Config.OpenSteps it first
// measures the admissions' closed-loop maximum.
func (r *run) openLoop(ctx context.Context) error {
	o := &OpenLoop{Path: openPath, Seconds: r.cfg.OpenFor.Seconds()}
	r.report.Open = o
	rates, percents := []float64{r.cfg.OpenRate}, []float64{0}
	if r.cfg.OpenRate <= 0 {
		top, err := r.admissionsMax(ctx)
		if err != nil {
			return err
		}
		o.MaxRate = top.Rate
		rates, percents = nil, nil
		for _, f := range r.cfg.OpenSteps {
			rates, percents = append(rates, f*top.Rate), append(percents, 100*f)
		}
	}
	for k, rate := range rates {
		if rate <= 0 {
			continue
		}
		step := OpenStep{Percent: percents[k], Rate: rate}
		n := int64(math.Ceil(rate * r.cfg.OpenFor.Seconds()))
		warm := int64(math.Ceil(rate * warmUp(r.cfg.OpenFor).Seconds()))
		if err := r.mintTokens(int(n + warm)); err != nil {
			return err
		}
		step.Bare = r.openPhase(ctx, rate, n, warm, r.bare.url, r.path(r.report.Voucher), r.bareClient)
		id, err := r.createVoucher(n+warm, fmt.Sprintf("open loop %.0f/s", rate), false)
		if err != nil {
			return err
		}
		step.Server = r.openPhase(ctx, rate, n, warm, "", r.path(id), r.client)
		step.Server.Voucher = id
		// The next step starts once the database holds these orders: a
		// step's backlog is not the next one's load.
		step.Server.Drain = r.written(ctx, id, n+warm, step.Server.Answers["ok"])
		if math.Abs(step.Percent-80) < 1e-9 && step.Bare.P99 > 0 {
			met := step.Server.P99 <= 2*step.Bare.P99
			step.TargetMet = &met
		}
		o.Steps = append(o.Steps, step)
		r.say("open loop at %.0f req/s: server p99 %v, bare handler p99 %v", rate, ms(step.Server.P99), ms(step.Bare.P99))
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// admissionsMax measures the admissions' closed-loop maximum on a fresh
// voucher, one buyer per request, for OpenFor.
func (r *run) admissionsMax(ctx context.Context) (Phase, error) {
	// Enough buyers for the most the sale suggests; a loop that runs out
	// of them ends early, its rate still its requests over its time.
	limit := int64(1.5*max(r.report.MaxRate, r.report.Rate)*r.cfg.OpenFor.Seconds()) + int64(r.cfg.Concurrency)
	limit = max(limit, 1000)
	if err := r.mintTokens(int(limit)); err != nil {
		return Phase{}, err
	}
	id, err := r.createVoucher(limit, "admissions maximum", false)
	if err != nil {
		return Phase{}, err
	}
	path := r.path(id)
	p := r.phase("admissions max", func() loopResult {
		return r.closedLoop(ctx, r.cfg.OpenFor, limit, func(ctx context.Context, i int64) error {
			rep, code, err := r.buyCode(ctx, "", path, r.tokens[i])
			if err == nil && (rep.status != http.StatusOK || code != "") {
				return fmt.Errorf("answered %d %s", rep.status, code)
			}
			return err
		})
	})
	r.written(ctx, id, limit, p.Requests)
	r.say("admissions, closed loop: %.0f req/s", p.Rate)
	if p.Requests == 0 {
		return Phase{}, fmt.Errorf("bench: no admission answered 200 in the closed loop (%d errors)", p.Errors)
	}
	return p, nil
}

// openPhase sends n requests at rate to base (the server's when empty)
// and measures them, after warm at the same rate unmeasured, which dial
// the connections the rate needs. Request i is buyer i's; the warm-up's,
// buyers n to n+warm-1.
func (r *run) openPhase(ctx context.Context, rate float64, n, warm int64, base, path string, client *http.Client) OpenResult {
	buy := func(offset int64) func(ctx context.Context, i int64) (reply, string, error) {
		return func(ctx context.Context, i int64) (reply, string, error) {
			return r.buyCodeWith(ctx, client, base, path, r.tokens[(offset+i)%int64(len(r.tokens))])
		}
	}
	if warm > 0 {
		warmBuy := buy(n)
		openLoop{rate: rate, n: warm, inflight: r.cfg.Concurrency}.run(ctx, func(ctx context.Context, i int64) error {
			_, _, err := warmBuy(ctx, i)
			return err
		}, func(int64, time.Duration, error) {})
	}
	var (
		hist     histogram
		answers  sync.Map
		errs     tally
		answered atomic.Int64
	)
	measured := buy(0)
	loop := openLoop{rate: rate, n: n, inflight: r.cfg.Concurrency}
	before := r.cpu.sample()
	st := loop.run(ctx, func(ctx context.Context, i int64) error {
		rep, code, err := measured(ctx, i)
		if err != nil {
			return err
		}
		key := code
		switch {
		case rep.status == http.StatusOK:
			key = "ok"
		case key == "":
			key = strconv.Itoa(rep.status)
		}
		c, _ := answers.LoadOrStore(key, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		return nil
	}, func(_ int64, d time.Duration, err error) {
		if err != nil {
			if ctx.Err() == nil {
				errs.add(err)
			}
			return
		}
		hist.record(d)
		answered.Add(1)
	})
	after := r.cpu.sample()
	s := hist.take(false)
	res := OpenResult{
		Scheduled: n, Sent: st.sent, Late: st.late, Dropped: st.dropped, LagMax: st.lag,
		Errors: errs.total(), ConnRefused: errs.refused.Load(), ConnReset: errs.reset.Load(),
		Answers: map[string]int64{}, Seconds: st.elapsed.Seconds(),
		Rate: float64(answered.Load()) / st.elapsed.Seconds(),
		P50:  s.quantile(0.5), P99: s.quantile(0.99), P999: s.quantile(0.999), Max: time.Duration(s.max) * time.Microsecond,
		CPU: r.cpu.since(before, after, answered.Load()),
	}
	answers.Range(func(k, v any) bool {
		res.Answers[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return res
}
