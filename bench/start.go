package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// arrivalBucket is the width of the start figure's buckets.
const arrivalBucket = 100 * time.Millisecond

// arrivalsCounted says where the start figure counts a buy's arrival.
const arrivalsCounted = "by the client, as each buy request is sent (after its challenge is solved); on loopback a request reaches the server within the same 100 ms"

// arrivals counts events in buckets of a fixed width from a start, safely
// from many goroutines; those past the last bucket are counted apart.
type arrivals struct {
	start  time.Time
	width  time.Duration
	counts []atomic.Int64
	after  atomic.Int64
}

// newArrivals makes the buckets of span from start, span rounded up.
func newArrivals(start time.Time, width, span time.Duration) *arrivals {
	n := int((span + width - 1) / width)
	return &arrivals{start: start, width: width, counts: make([]atomic.Int64, max(n, 1))}
}

// note counts an event at t; one before the start counts in the first
// bucket.
func (a *arrivals) note(t time.Time) {
	i := max(int(t.Sub(a.start)/a.width), 0)
	if i >= len(a.counts) {
		a.after.Add(1)
		return
	}
	a.counts[i].Add(1)
}

func (a *arrivals) buckets() []int64 {
	out := make([]int64, len(a.counts))
	for i := range a.counts {
		out[i] = a.counts[i].Load()
	}
	return out
}

// peak returns the largest bucket and its index (the first of equals).
func peak(buckets []int64) (int64, int) {
	best, at := int64(0), 0
	for i, n := range buckets {
		if n > best {
			best, at = n, i
		}
	}
	return best, at
}

// Start is the start-of-sale figure: the same buyers, in the same order,
// with the same concurrency, buy a fresh voucher from the moment it goes
// on sale, in rounds without and with the challenge, alternated; the buy
// requests are counted per 100 ms from each round's start. What moves
// between the two kinds is the challenge alone: each buy of a challenge
// round is preceded by the GET of a challenge and its solve.
type Start struct {
	// Bucket is the width of a bucket; Seconds, how long each round sends
	// at most (Config.StartFor): the buckets cover it, buys sent later
	// are counted in a round's After.
	Bucket  time.Duration `json:"bucketNs"`
	Seconds float64       `json:"secondsPerRound"`
	// Planned is the buys each round offers: every buyer Repeat times, in
	// one shuffled order that every round follows.
	Planned int64 `json:"planned"`
	// Counted says where an arrival is counted.
	Counted string `json:"arrivalsCounted"`
	// Rounds are in the order run: pairs, plain first in the first pair,
	// the challenge first in the second, and so on.
	Rounds []StartRound `json:"rounds"`
	// Plain and Challenge average the rounds of each kind; PeakRatio is
	// the challenge rounds' mean peak over the plain rounds'.
	Plain     StartSummary `json:"plain"`
	Challenge StartSummary `json:"challenge"`
	PeakRatio float64      `json:"peakRatio"`
	// ServerCPUIncludesClient says that the server ran in the bench's
	// process: its CPU is then the client's too, solving included, and
	// tells nothing of the server's.
	ServerCPUIncludesClient bool `json:"serverCpuIncludesClient,omitempty"`
	// Errors are the rounds' buys that got no answer; ChallengeErrors,
	// those refused for their challenge (or not solved): both count
	// against the books.
	Errors          int64 `json:"errors"`
	ChallengeErrors int64 `json:"challengeErrors"`
}

// StartRound is one round of the start figure.
type StartRound struct {
	Challenge bool  `json:"challenge"`
	Voucher   int64 `json:"voucherId"`
	// Sent is the buys sent; Buckets, of them, those sent in each 100 ms
	// from the start; After, those sent after the last bucket.
	Sent    int64   `json:"sent"`
	Buckets []int64 `json:"buckets"`
	After   int64   `json:"after"`
	// Peak is the largest bucket, PeakAt its index; FirstSecond, the buys
	// sent in the first second.
	Peak        int64 `json:"peak"`
	PeakAt      int   `json:"peakAt"`
	FirstSecond int64 `json:"firstSecond"`
	// Seconds is from the start until the last answer.
	Seconds float64          `json:"seconds"`
	Answers map[string]int64 `json:"answers"`
	// Errors are buys or challenge requests that got no answer.
	Errors int64 `json:"errors"`
	// Verified is the buys whose solution the server must have verified:
	// those admitted or told they hold an order already (a duplicate needs
	// a solution). A sold_out answer may come before the check.
	Verified int64 `json:"verified"`
	// Solves are the round's challenges (challenge rounds).
	Solves *Solves `json:"solves,omitempty"`
	// CPU is each watched process's, per 1,000 buys sent.
	CPU []CPU `json:"cpu"`
	// ServerCPU is the server's CPU seconds in the round (see
	// Start.ServerCPUIncludesClient); -1 when not measured.
	ServerCPU float64 `json:"serverCpuSeconds"`
	// Drain is how long after the round the database took to hold its
	// admitted orders; the next round waits for it.
	Drain time.Duration `json:"drainNs"`
}

// StartSummary averages the rounds of one kind.
type StartSummary struct {
	Rounds int `json:"rounds"`
	// Peak and FirstSecond are the mean peak bucket and first second;
	// Buckets, the mean of each bucket.
	Peak        float64   `json:"peak"`
	FirstSecond float64   `json:"firstSecond"`
	Buckets     []float64 `json:"buckets"`
	// ServerUsPerBuy is the server's CPU per buy sent, in µs, whole-run:
	// the rounds' CPU over their buys. ServerUsPerVerified is, in the
	// challenge rounds, their CPU over the solutions verified. 0 when not
	// measured.
	ServerUsPerBuy      float64 `json:"serverCpuUsPerBuy"`
	ServerUsPerVerified float64 `json:"serverCpuUsPerVerified,omitempty"`
}

// startRounds runs Config.StartRounds pairs of rounds, alternating which
// kind goes first, and summarizes them.
func (r *run) startRounds(ctx context.Context) error {
	plan := make([]int32, 0, r.cfg.Users*r.cfg.Repeat)
	for i := range r.cfg.Users {
		for range r.cfg.Repeat {
			plan = append(plan, int32(i))
		}
	}
	rand.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	st := &Start{Bucket: arrivalBucket, Seconds: r.cfg.StartFor.Seconds(), Planned: int64(len(plan)), Counted: arrivalsCounted}
	r.report.Start = st
	for pair := range r.cfg.StartRounds {
		kinds := []bool{false, true}
		if pair%2 == 1 {
			kinds = []bool{true, false}
		}
		for _, challenge := range kinds {
			round, err := r.startRound(ctx, plan, challenge)
			if err != nil {
				return err
			}
			st.Rounds = append(st.Rounds, round)
			kind := "plain"
			if challenge {
				kind = "challenge"
			}
			r.say("start round %d, %s: %d buys sent, peak %d in 100 ms (at %v), %d in the first second", len(st.Rounds), kind,
				round.Sent, round.Peak, time.Duration(round.PeakAt)*arrivalBucket, round.FirstSecond)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	st.summarize(r.cfg.ServerInProcess)
	return nil
}

// startRound runs one round: a fresh voucher of the sale's stock, on sale
// from the moment every sender is ready, bought along the plan by
// Concurrency senders until the plan is done or StartFor has passed.
func (r *run) startRound(ctx context.Context, plan []int32, challenge bool) (StartRound, error) {
	title := "start"
	if challenge {
		title = "start, challenge"
	}
	id, err := r.createVoucher(r.cfg.Stock, title, challenge)
	if err != nil {
		return StartRound{}, err
	}
	path := r.path(id)
	var (
		solves  solver
		answers sync.Map
		errs    tally
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	count := func(key string) {
		c, _ := answers.LoadOrStore(key, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
	}
	begin := make(chan struct{})
	var arr *arrivals
	var end time.Time
	for range r.cfg.Concurrency {
		wg.Go(func() {
			<-begin
			for ctx.Err() == nil && time.Now().Before(end) {
				i := next.Add(1) - 1
				if i >= int64(len(plan)) {
					return
				}
				token := r.tokens[plan[i]]
				var altcha string
				if challenge {
					header, key, err := r.solve(ctx, &solves, id, token)
					switch {
					case err != nil:
						if ctx.Err() == nil {
							count(errs.add(err))
						}
						continue
					case key != "":
						count(key)
						continue
					}
					altcha = header
				}
				arr.note(time.Now())
				var a answer
				rep, err := r.sendAltcha(ctx, r.client, "", "POST", path, token, altcha, nil, &a)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						count(errs.add(err))
					}
				case rep.status == http.StatusOK:
					count("ok")
				case a.Code != "":
					count(a.Code)
				default:
					count(strconv.Itoa(rep.status))
				}
			}
		})
	}
	before := r.cpu.sample()
	start := time.Now()
	arr, end = newArrivals(start, arrivalBucket, r.cfg.StartFor), start.Add(r.cfg.StartFor)
	close(begin) // the senders read arr and end after this
	wg.Wait()
	elapsed := time.Since(start)
	after := r.cpu.sample()
	round := StartRound{Challenge: challenge, Voucher: id, Buckets: arr.buckets(), After: arr.after.Load(),
		Seconds: elapsed.Seconds(), Answers: map[string]int64{}, Errors: errs.total(), Solves: solves.stats()}
	answers.Range(func(k, v any) bool {
		round.Answers[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	for _, n := range round.Buckets {
		round.Sent += n
	}
	round.Sent += round.After
	round.Peak, round.PeakAt = peak(round.Buckets)
	for i, n := range round.Buckets {
		if time.Duration(i)*arrivalBucket < time.Second {
			round.FirstSecond += n
		}
	}
	if challenge {
		round.Verified = round.Answers["ok"] + round.Answers["duplicate_order"]
	}
	round.CPU = r.cpu.since(before, after, round.Sent)
	round.ServerCPU = serverCPU(round.CPU, r.cfg.ServerInProcess)
	// The next round starts once the database holds these orders: one
	// round's backlog is not the next one's load.
	round.Drain = r.written(ctx, id, r.cfg.Stock, round.Answers["ok"])
	return round, ctx.Err()
}

// serverCPU is the CPU seconds of the server's watched processes in cpu,
// or, with the server in this process, this process's; -1 when neither
// was read.
func serverCPU(cpu []CPU, inProcess bool) float64 {
	sum, found := 0.0, false
	for _, c := range cpu {
		if c.Server || (inProcess && c.Self) {
			sum, found = sum+c.Seconds, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// summarize averages the rounds of each kind, and totals their errors.
func (s *Start) summarize(serverInProcess bool) {
	s.ServerCPUIncludesClient = serverInProcess
	s.Plain, s.Challenge = StartSummary{}, StartSummary{}
	var cpu, buys, verified [2]float64
	measured := [2]bool{true, true}
	for _, round := range s.Rounds {
		k, sum := 0, &s.Plain
		if round.Challenge {
			k, sum = 1, &s.Challenge
		}
		sum.Rounds++
		sum.Peak += float64(round.Peak)
		sum.FirstSecond += float64(round.FirstSecond)
		if len(sum.Buckets) < len(round.Buckets) {
			sum.Buckets = append(sum.Buckets, make([]float64, len(round.Buckets)-len(sum.Buckets))...)
		}
		for i, n := range round.Buckets {
			sum.Buckets[i] += float64(n)
		}
		if round.ServerCPU < 0 {
			measured[k] = false
		}
		cpu[k] += round.ServerCPU
		buys[k] += float64(round.Sent)
		verified[k] += float64(round.Verified)
		s.Errors += round.Errors
		s.ChallengeErrors += countCodes(round.Answers, challengeCodes)
	}
	for k, sum := range []*StartSummary{&s.Plain, &s.Challenge} {
		if sum.Rounds == 0 {
			continue
		}
		n := float64(sum.Rounds)
		sum.Peak /= n
		sum.FirstSecond /= n
		for i := range sum.Buckets {
			sum.Buckets[i] /= n
		}
		if measured[k] && buys[k] > 0 {
			sum.ServerUsPerBuy = cpu[k] * 1e6 / buys[k]
		}
		if measured[k] && k == 1 && verified[k] > 0 {
			sum.ServerUsPerVerified = cpu[k] * 1e6 / verified[k]
		}
	}
	if s.Plain.Peak > 0 {
		s.PeakRatio = s.Challenge.Peak / s.Plain.Peak
	}
}

// countCodes sums the answers of these codes.
func countCodes(answers map[string]int64, codes []string) int64 {
	var n int64
	for _, c := range codes {
		n += answers[c]
	}
	return n
}

// startTable writes the start figure of a report: a row per round, its
// first second's buckets, and the averages.
func startTable(w io.Writer, r *Report) {
	s := r.Start
	fmt.Fprintf(w, "%s: arrivals of buy requests per 100 ms from the start of a sale, %d buys offered a round (%d buyers × %d), %d connections,\n",
		r.Label, s.Planned, r.Users, s.Planned/int64(max(r.Users, 1)), r.Connections)
	fmt.Fprintf(w, "each round at most %.1fs, counted %s:\n", s.Seconds, s.Counted)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "round\tkind\tsent\tpeak\tat\tfirst second\t")
	for i := range 10 {
		fmt.Fprintf(tw, "%d\t", (i+1)*100)
	}
	fmt.Fprint(tw, "ok\tverified\tserver CPU/buy\tsolve p50\tsolve p99\tmaxnumber\t\n")
	for i, round := range s.Rounds {
		kind, p50, p99, maxNumber := "plain", "-", "-", "-"
		if round.Challenge {
			kind = "challenge"
		}
		if v := round.Solves; v != nil {
			p50, p99, maxNumber = ms(v.P50), ms(v.P99), maxNumbers(v.MaxNumbers)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%v\t%d\t", i+1, kind, round.Sent, round.Peak, time.Duration(round.PeakAt)*arrivalBucket, round.FirstSecond)
		for b := range 10 {
			n := int64(0)
			if b < len(round.Buckets) {
				n = round.Buckets[b]
			}
			fmt.Fprintf(tw, "%d\t", n)
		}
		perBuy := "-"
		if round.ServerCPU >= 0 && round.Sent > 0 {
			perBuy = fmt.Sprintf("%.0f µs", round.ServerCPU*1e6/float64(round.Sent))
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t\n", round.Answers["ok"], round.Verified, perBuy, p50, p99, maxNumber)
	}
	tw.Flush()
	for _, k := range []struct {
		name string
		sum  StartSummary
	}{{"plain", s.Plain}, {"challenge", s.Challenge}} {
		fmt.Fprintf(w, "  %s, mean of %d rounds: peak %.0f in 100 ms, first second %.0f, its buckets", k.name, k.sum.Rounds, k.sum.Peak, k.sum.FirstSecond)
		for i, n := range k.sum.Buckets {
			if time.Duration(i)*arrivalBucket >= time.Second {
				break
			}
			fmt.Fprintf(w, " %.0f", n)
		}
		if k.sum.ServerUsPerBuy > 0 {
			fmt.Fprintf(w, "; server CPU %.1f µs per buy", k.sum.ServerUsPerBuy)
		}
		if k.sum.ServerUsPerVerified > 0 {
			fmt.Fprintf(w, ", %.1f µs per verified solution", k.sum.ServerUsPerVerified)
		}
		fmt.Fprintln(w)
	}
	if s.PeakRatio > 0 {
		fmt.Fprintf(w, "  the challenge's peak ÷ the plain peak: %.2f×\n", s.PeakRatio)
	}
	if s.ServerCPUIncludesClient {
		fmt.Fprintln(w, "  (server CPU: this process's, the client and its solving included: bench a server run as a process of its own, --url, for the server's alone)")
	}
}
