package bench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a run measured. Rates are requests per second over a
// phase's whole wall time, unless named otherwise; latencies are of the
// sale's requests.
type Report struct {
	Label string `json:"label"`
	// Connections is how many clients sent at once, each on a keep-alive
	// connection of its own (Config.Concurrency).
	Connections int   `json:"connections"`
	Voucher     int64 `json:"voucherId"`
	Stock       int64 `json:"stock"`
	// Shards is the voucher's shards (Config.Shards); absent for 1.
	Shards   int   `json:"shards,omitempty"`
	Users    int   `json:"users"`
	Requests int64 `json:"requests"`
	// Seconds is the sale's wall time; Rate, the headline, its requests
	// over it. MaxRate is the best one-second interval of the sale.
	Seconds float64       `json:"seconds"`
	Rate    float64       `json:"reqPerSec"`
	MaxRate float64       `json:"maxReqPerSec"`
	Mean    time.Duration `json:"meanNs"`
	P50     time.Duration `json:"p50Ns"`
	P99     time.Duration `json:"p99Ns"`
	P999    time.Duration `json:"p999Ns"`
	Max     time.Duration `json:"maxNs"`
	// Answers counts the sale's answers by code ("ok" for 200), and its
	// requests that got none by kind: connection_refused,
	// connection_reset, transport_error.
	Answers map[string]int64 `json:"answers"`
	// Errors is the sale's requests that got no answer, of which
	// ConnRefused were refused and ConnReset reset.
	Errors      int64 `json:"errors"`
	ConnRefused int64 `json:"connRefused"`
	ConnReset   int64 `json:"connReset"`
	// Bare is the bare handler's rate: plain net/http served by the bench
	// on a loopback port of its own process, answering the sale's very
	// requests with a sold-out answer of the same size and doing nothing
	// else. Every "× bare" ratio is against it. Healthz is the server's
	// GET /healthz through its whole middleware. Both are measured before
	// the sale with the same client, connections and time, and are 0 when
	// skipped.
	Bare    float64 `json:"bareReqPerSec"`
	Healthz float64 `json:"healthzReqPerSec"`
	BareURL string  `json:"bareUrl,omitempty"`
	// BareAnswer is the bare handler's answer body, SoldOutAnswer the
	// server's first sold-out answer's (zero if it gave none).
	BareAnswer    Answer `json:"bareAnswer"`
	SoldOutAnswer Answer `json:"soldOutAnswer"`
	// SoldOut is the rate of sold-out answers, measured after the sale.
	SoldOut float64 `json:"soldOutReqPerSec"`
	// SoldOutOther counts, by code, that phase's answers other than
	// sold_out (its failures that got an answer): with Challenge, a buy
	// without a solution is answered challenge_required once the server
	// no longer knows the voucher sold out.
	SoldOutOther map[string]int64 `json:"soldOutOtherAnswers,omitempty"`
	// TimesBare are the rates over Bare.
	TimesBare Ratios `json:"timesBare"`
	// RateUntilSoldOut and RateAfterSoldOut split the sale at its first
	// sold_out answer: requests answered before it over the time until it,
	// and after it over the rest of the sale (0 when the sale did not sell
	// out). A sale that slows down once sold out shows it here.
	RateUntilSoldOut float64 `json:"reqPerSecUntilSoldOut"`
	RateAfterSoldOut float64 `json:"reqPerSecAfterSoldOut"`
	// SoldOutAfterLastUnit is how long after the last answer 200 (the last
	// unit sold) the first sold_out answer came, both as the buyers got
	// them: what the last buyers wait to be told, where a sharded voucher
	// must first find every shard empty. Negative: a sold_out came before
	// the last 200 (each decided in its own request, and answered in any
	// order). Absent when the sale did not sell out.
	SoldOutAfterLastUnit *time.Duration `json:"soldOutAfterLastUnit,omitempty"`
	// Phases are the run's timed parts in order (bare, healthz, sale,
	// sold-out, drain, admissions max), each with the CPU of the watched
	// processes.
	Phases []Phase `json:"phases"`
	// Database names the database's watched processes, and DatabaseCores
	// is their CPU during the sale, in cores (1 is one core busy); empty
	// and 0 when the database is not a process of its own here.
	// DatabaseCoresBare is theirs during the bare phase, when no request
	// of the run reaches them: what other clients of a shared database
	// cost meanwhile.
	Database          string  `json:"database,omitempty"`
	DatabaseCores     float64 `json:"databaseCoresDuringSale"`
	DatabaseCoresBare float64 `json:"databaseCoresDuringBare"`
	// DatabaseCoresPeak is the database's busiest second of the sale, in
	// cores: the best one-second sample of its watched processes.
	DatabaseCoresPeak float64 `json:"databaseCoresPeak"`
	// DBLatency, with the database behind a delaying proxy (seckill bench
	// --db-latency), is what the proxy was measured to add to a round trip
	// before the run, at idle; DBLatencyUnderLoad, during the sale.
	DBLatency          *Added `json:"dbLatency,omitempty"`
	DBLatencyUnderLoad *Added `json:"dbLatencyDuringSale,omitempty"`
	// DBOutage is when the database was unreachable during the sale
	// (Config.Outage).
	DBOutage *OutageReport `json:"dbOutage,omitempty"`
	// Challenge says the sale's voucher asked for a solved challenge
	// (Config.Challenge); Solves are the sale's, and ChallengeErrors the
	// sale's buys refused for their challenge (challenge_required,
	// challenge_invalid) or not solved: a fault, against the books.
	Challenge       bool    `json:"challenge,omitempty"`
	Solves          *Solves `json:"solves,omitempty"`
	ChallengeErrors int64   `json:"challengeErrors"`
	// Start is the start-of-sale figure, when its rounds were run.
	Start *Start `json:"start,omitempty"`
	// Open is the open-loop part, when one was run.
	Open      *OpenLoop     `json:"openLoop,omitempty"`
	Admitted  int64         `json:"admitted"`
	Created   int64         `json:"created"`
	Oversold  int64         `json:"oversold"`
	Doubles   int64         `json:"buyersWithTwoOrders"`
	Lost      int64         `json:"lost"`
	Drain     time.Duration `json:"drainNs"`
	DrainRate float64       `json:"dbOrdersPerSec"`
	Agree     *bool         `json:"redisAndDatabaseAgree,omitempty"`
	AgreeNote string        `json:"agreeDetail,omitempty"`
}

// Ratios are rates over the bare handler's, measured in the same run;
// zero when it was not measured.
type Ratios struct {
	Sale       float64 `json:"sale"`
	BestSecond float64 `json:"bestSecond"`
	SoldOut    float64 `json:"soldOut"`
	Healthz    float64 `json:"healthz"`
}

// Phase is one timed part of a run.
type Phase struct {
	Name string `json:"name"`
	// Requests is how many were answered as expected (for the drain, the
	// orders written when the workers were held back, else 0); Rate is
	// them over Seconds, the phase's wall time.
	Requests int64   `json:"requests"`
	Seconds  float64 `json:"seconds"`
	Rate     float64 `json:"reqPerSec"`
	// Errors counts requests that got no answer or not the expected one
	// (e.g. rate_limited), of which ConnRefused were refused and ConnReset
	// reset.
	Errors      int64 `json:"errors"`
	ConnRefused int64 `json:"connRefused"`
	ConnReset   int64 `json:"connReset"`
	// CPU is what each watched process spent.
	CPU []CPU `json:"cpu"`
	// ServerMsPer1k, when the server runs in the bench's process, is that
	// process's CPU per 1,000 requests less the bare phase's: the server's
	// cost beyond a bare HTTP answer (the bare phase's cost is the client
	// and a bare net/http server).
	ServerMsPer1k float64 `json:"serverCpuMsPer1kBeyondBare,omitempty"`
}

// OK reports whether the books balance: no oversell, no order lost, no
// buyer twice, no transport error, no buy refused for its challenge (in
// the sale or the start rounds), and Redis and the database agree where
// that was checked.
func (r *Report) OK() bool {
	return r.Oversold == 0 && r.Lost == 0 && r.Doubles == 0 && r.Errors == 0 && r.ChallengeErrors == 0 &&
		(r.Start == nil || r.Start.Errors == 0 && r.Start.ChallengeErrors == 0) && (r.Agree == nil || *r.Agree)
}

// phase returns the run's phase of that name, or nil.
func (r *Report) phase(name string) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

// summarize computes what the report derives from its measurements: the
// ratios to the bare handler, the database's cores during the sale, and,
// with the server in process, its CPU beyond the bare phase's.
func (r *Report) summarize(serverInProcess bool) {
	over := func(v float64) float64 {
		if r.Bare <= 0 {
			return 0
		}
		return v / r.Bare
	}
	r.TimesBare = Ratios{Sale: over(r.Rate), BestSecond: over(r.MaxRate), SoldOut: over(r.SoldOut), Healthz: over(r.Healthz)}
	if sale := r.phase("sale"); sale != nil {
		var names []string
		for _, c := range sale.CPU {
			if c.Database {
				names = append(names, c.Process)
				r.DatabaseCores += c.Cores
			}
		}
		r.Database = strings.Join(names, " + ")
	}
	if bare := r.phase("bare"); bare != nil {
		for _, c := range bare.CPU {
			if c.Database {
				r.DatabaseCoresBare += c.Cores
			}
		}
	}
	if !serverInProcess {
		return
	}
	bare := r.phase("bare")
	if bare == nil || bare.Requests == 0 {
		return
	}
	base := selfMsPer1k(bare.CPU)
	for i := range r.Phases {
		if p := &r.Phases[i]; p.Name != "bare" && p.Requests > 0 && p.Name != "drain" {
			p.ServerMsPer1k = selfMsPer1k(p.CPU) - base
		}
	}
}

func selfMsPer1k(cpu []CPU) float64 {
	for _, c := range cpu {
		if c.Self {
			return c.MsPer1k
		}
	}
	return 0
}

// Table writes reports as tables: the rates and their ratios to the bare
// handler (and to the first sync run), the sale's latencies and books, the
// CPU per phase of each run, and the open loop's latencies.
func Table(w io.Writer, reports []*Report) {
	rates(w, reports)
	fmt.Fprintln(w)
	latencies(w, reports)
	for _, r := range reports {
		fmt.Fprintln(w)
		cpuTable(w, r)
	}
	if slices.ContainsFunc(reports, func(r *Report) bool { return r.Open != nil }) {
		fmt.Fprintln(w)
		openTable(w, reports)
	}
	if slices.ContainsFunc(reports, func(r *Report) bool { return r.Solves != nil }) {
		fmt.Fprintln(w)
		solveTable(w, reports)
	}
	for _, r := range reports {
		if r.Start != nil {
			fmt.Fprintln(w)
			startTable(w, r)
		}
	}
	fmt.Fprintln(w)
	for _, r := range reports {
		notes(w, r)
	}
}

// rates writes the rates: the headline is the sale's requests over its
// whole time; the best second beside it.
func rates(w io.Writer, reports []*Report) {
	fmt.Fprintln(w, "Rates, requests ÷ whole wall time; × bare: over the bare handler (plain net/http answering the sale's requests")
	fmt.Fprintln(w, "with a sold-out answer, nothing else), measured like the others before the sale, same client and connections:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tconns\treq/s\t× bare\t× sync\tbest second\t× bare\tsold-out req/s\t× bare\tGET /healthz\t× bare\tbare handler\t")
	for _, r := range reports {
		vsSync := "-"
		if base := syncBase(reports, r); base != nil && base.Rate > 0 {
			vsSync = fmt.Sprintf("%.1f×", r.Rate/base.Rate)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Label, r.Connections,
			thousands(r.Rate), times(r.TimesBare.Sale), vsSync, thousands(r.MaxRate), times(r.TimesBare.BestSecond),
			thousands(r.SoldOut), times(r.TimesBare.SoldOut), thousands(r.Healthz), times(r.TimesBare.Healthz), thousands(r.Bare))
	}
	tw.Flush()
}

// syncBase is the report × sync compares r with: the first sync run at
// r's connections.
func syncBase(reports []*Report, r *Report) *Report {
	for _, b := range reports {
		if strings.HasPrefix(b.Label, "sync") && b.Connections == r.Connections {
			return b
		}
	}
	return nil
}

func latencies(w io.Writer, reports []*Report) {
	fmt.Fprintln(w, "The sale's latencies (closed loop: from each request's send) and books; DB CPU: the database's cores busy")
	fmt.Fprintln(w, "during the sale (100% = one core), its busiest second's (peak), and during the bare phase, which sends it")
	fmt.Fprintln(w, "nothing (other clients' load):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tconns\tmean\tp50\tp99\tp99.9\tmax\terrors\trefused\treset\toversold\tlost\ttwo orders\tdrain\tDB orders/s\tDB CPU, sale\t")
	for _, r := range reports {
		db := "-"
		if r.Database != "" {
			db = fmt.Sprintf("%.0f%% (peak %.0f%%) %s", 100*r.DatabaseCores, 100*r.DatabaseCoresPeak, r.Database)
			if r.phase("bare") != nil {
				db += fmt.Sprintf(" (bare: %.0f%%)", 100*r.DatabaseCoresBare)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t%s\t%s\t\n", r.Label, r.Connections,
			ms(r.Mean), ms(r.P50), ms(r.P99), ms(r.P999), ms(r.Max), r.Errors, r.ConnRefused, r.ConnReset,
			r.Oversold, r.Lost, r.Doubles, r.Drain.Round(time.Millisecond), thousands(r.DrainRate), db)
	}
	tw.Flush()
	var db []string
	for _, r := range reports {
		if r.Database != "" {
			db = append(db, fmt.Sprintf("%s %.0f%% (peak second %.0f%%)", r.Label, 100*r.DatabaseCores, 100*r.DatabaseCoresPeak))
		}
	}
	if len(db) > 0 {
		fmt.Fprintf(w, "Database CPU during the sale, %% of one core: %s\n", strings.Join(db, ", "))
	}
	for _, r := range reports {
		if r.DBLatency != nil {
			fmt.Fprintf(w, "%s: the database behind a delaying proxy; measured before the sale, it %v\n", r.Label, r.DBLatency)
			if a := r.DBLatencyUnderLoad; a != nil {
				fmt.Fprintf(w, "  during the sale, it %v\n", a)
			}
		}
		if o := r.DBOutage; o != nil {
			fmt.Fprintf(w, "%s: the database was unreachable from %v to %v into the sale (%v)\n", r.Label,
				o.Down.Round(time.Millisecond), o.Up.Round(time.Millisecond), (o.Up - o.Down).Round(time.Millisecond))
		}
	}
}

// cpuTable writes a run's CPU by phase and process.
func cpuTable(w io.Writer, r *Report) {
	var procs []string
	for _, p := range r.Phases {
		for _, c := range p.CPU {
			if !slices.Contains(procs, c.Process) {
				procs = append(procs, c.Process)
			}
		}
	}
	fmt.Fprintf(w, "%s (%d connections): CPU ms per 1,000 requests and cores busy (100%% = one core), by phase:\n", r.Label, r.Connections)
	if len(procs) == 0 {
		fmt.Fprintln(w, "  (no CPU figures: /proc is not readable here)")
		return
	}
	beyond := slices.ContainsFunc(r.Phases, func(p Phase) bool { return p.ServerMsPer1k != 0 })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "phase\trequests\terrors\twall\t")
	for _, name := range procs {
		fmt.Fprintf(tw, "%s\t", name)
	}
	if beyond {
		fmt.Fprint(tw, "server beyond bare\t")
	}
	fmt.Fprintln(tw)
	for _, p := range r.Phases {
		name, n := p.Name, strconv.FormatInt(p.Requests, 10)
		if p.Name == "drain" {
			name, n = "drain (orders)", "-"
			if p.Requests > 0 {
				n = strconv.FormatInt(p.Requests, 10)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2fs\t", name, n, p.Errors, p.Seconds)
		for _, proc := range procs {
			fmt.Fprintf(tw, "%s\t", cpuCell(p, proc))
		}
		if beyond {
			cell := "-"
			if p.ServerMsPer1k != 0 {
				cell = fmt.Sprintf("%.1f ms", p.ServerMsPer1k)
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func cpuCell(p Phase, proc string) string {
	i := slices.IndexFunc(p.CPU, func(c CPU) bool { return c.Process == proc })
	if i < 0 {
		return "-"
	}
	c := p.CPU[i]
	if p.Seconds < 0.1 { // /proc counts in 10 ms ticks
		return "(too short)"
	}
	per := "-"
	if p.Requests > 0 {
		per = fmt.Sprintf("%.1f ms", c.MsPer1k)
	}
	return fmt.Sprintf("%s %4.0f%%", per, 100*c.Cores)
}

// openTable writes the open loop's steps, the server's and the bare
// handler's side by side, and whether the target is met.
func openTable(w io.Writer, reports []*Report) {
	fmt.Fprintln(w, "Open loop: requests sent at a constant rate, each latency from its intended send time; late: due while no")
	fmt.Fprintln(w, "connection was free, sent when one came free; dropped: never sent, the step's deadline passing first.")
	fmt.Fprintln(w, "  server: "+openPath)
	fmt.Fprintln(w, "  bare:   the bare handler, sent the sale's requests at the same rate")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tstep\ttarget req/s\tto\tsent\tlate\tdropped\terrors\treq/s\tp50\tp99\tp99.9\tmax\tp99 × bare\tbench CPU/1k\tdrain\t")
	var targets []string
	for _, r := range reports {
		if r.Open == nil {
			continue
		}
		for _, s := range r.Open.Steps {
			step := "fixed"
			if s.Percent > 0 {
				step = fmt.Sprintf("%.0f%%", s.Percent)
			}
			for _, side := range []struct {
				name string
				res  OpenResult
			}{{"bare", s.Bare}, {"server", s.Server}} {
				ratio := "-"
				if side.name == "server" && s.Bare.P99 > 0 {
					ratio = times(float64(s.Server.P99) / float64(s.Bare.P99))
				}
				bench := "-"
				if i := slices.IndexFunc(side.res.CPU, func(c CPU) bool { return c.Self }); i >= 0 {
					bench = fmt.Sprintf("%.1f ms", side.res.CPU[i].MsPer1k)
				}
				drain := "-"
				if side.name == "server" {
					drain = side.res.Drain.Round(time.Millisecond).String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Label, step, thousands(s.Rate), side.name,
					side.res.Sent, side.res.Late, side.res.Dropped, side.res.Errors, thousands(side.res.Rate),
					ms(side.res.P50), ms(side.res.P99), ms(side.res.P999), ms(side.res.Max), ratio, bench, drain)
			}
			if s.TargetMet != nil {
				verdict := "met"
				if !*s.TargetMet {
					verdict = "MISSED"
				}
				targets = append(targets, fmt.Sprintf("  %s: at 80%% of its admissions' closed-loop maximum (%s of %s req/s), admission p99 %v ≤ 2 × the bare handler's %v = %v: %s",
					r.Label, thousands(s.Rate), thousands(r.Open.MaxRate), ms(s.Server.P99), ms(s.Bare.P99), ms(2*s.Bare.P99), verdict))
			}
		}
	}
	tw.Flush()
	if len(targets) > 0 {
		fmt.Fprintln(w, "Target:")
		for _, t := range targets {
			fmt.Fprintln(w, t)
		}
	}
}

// notes writes what a run's rows do not hold.
func notes(w io.Writer, r *Report) {
	fmt.Fprintf(w, "%s: answers %s", r.Label, answerCounts(r.Answers))
	if r.RateUntilSoldOut > 0 && r.RateAfterSoldOut > 0 {
		fmt.Fprintf(w, "; the sale's rate until its first sold_out answer %.0f req/s, after it %.0f req/s (%.2f×)",
			r.RateUntilSoldOut, r.RateAfterSoldOut, r.RateAfterSoldOut/r.RateUntilSoldOut)
	}
	if r.SoldOutAfterLastUnit != nil {
		fmt.Fprintf(w, "; the first sold_out %v after the last 200", roundTime(*r.SoldOutAfterLastUnit))
	}
	if len(r.SoldOutOther) > 0 {
		fmt.Fprintf(w, "; once sold out, answers other than sold_out: %s", answerCounts(r.SoldOutOther))
	}
	if r.Agree != nil {
		fmt.Fprintf(w, "; Redis and database agree: %v (%s)", *r.Agree, r.AgreeNote)
	}
	fmt.Fprintln(w)
	if r.BareURL != "" && r.SoldOutAnswer.Bytes > 0 && r.SoldOutAnswer != r.BareAnswer {
		fmt.Fprintf(w, "  WARNING: the bare handler answered %d bytes of %q, the server's sold-out answer was %d bytes of %q\n",
			r.BareAnswer.Bytes, r.BareAnswer.ContentType, r.SoldOutAnswer.Bytes, r.SoldOutAnswer.ContentType)
	}
}

// answerCounts formats answers by code as a person reads them, the most
// frequent first: "1,000 ok, 18,000 sold_out" (the JSON report keeps
// the map).
func answerCounts(answers map[string]int64) string {
	codes := slices.Collect(maps.Keys(answers))
	slices.SortFunc(codes, func(a, b string) int {
		return cmp.Or(cmp.Compare(answers[b], answers[a]), strings.Compare(a, b))
	})
	parts := make([]string, len(codes))
	for i, code := range codes {
		parts[i] = thousands(float64(answers[code])) + " " + code
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// roundTime rounds d for a person: to the microsecond below a
// millisecond, else to the tenth of a millisecond.
func roundTime(d time.Duration) time.Duration {
	if d > -time.Millisecond && d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Microsecond)
}

// times formats a ratio; "-" when there is none.
func times(v float64) string {
	switch {
	case v <= 0:
		return "-"
	case v >= 10:
		return fmt.Sprintf("%.0f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

// thousands formats a rate as a whole number with thousands separated.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ms rounds a latency for the table.
func ms(d time.Duration) string {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// Verdict says in words whether the books balance.
func Verdict(r *Report) string {
	var b strings.Builder
	check := func(ok bool, good, bad string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
		}
		text := good
		if !ok {
			text = bad
		}
		fmt.Fprintf(&b, "  %s %s\n", mark, text)
	}
	check(r.Oversold == 0, fmt.Sprintf("no oversell: %d orders for a stock of %d", r.Created, r.Stock),
		fmt.Sprintf("OVERSOLD by %d: %d orders for a stock of %d", r.Oversold, r.Created, r.Stock))
	check(r.Doubles == 0, "no buyer has two orders", fmt.Sprintf("%d buyers have two orders", r.Doubles))
	check(r.Lost == 0, fmt.Sprintf("nothing lost: all %d orders answered 200 are in the database", r.Admitted),
		fmt.Sprintf("%d of %d orders answered 200 are not in the database", r.Lost, r.Admitted))
	check(r.Errors == 0, "every request was answered", fmt.Sprintf("%d requests got no answer (%d refused, %d reset)", r.Errors, r.ConnRefused, r.ConnReset))
	if r.Challenge || r.ChallengeErrors > 0 {
		check(r.ChallengeErrors == 0, "no buy refused for its challenge: each carried a fresh solution of its own",
			fmt.Sprintf("%d buys refused for their challenge or not solved (challenge_required, challenge_invalid, %s)", r.ChallengeErrors, unsolvable))
	}
	if s := r.Start; s != nil {
		check(s.Errors == 0 && s.ChallengeErrors == 0, fmt.Sprintf("the %d start rounds: every request answered, no buy refused for its challenge", len(s.Rounds)),
			fmt.Sprintf("the start rounds: %d requests got no answer, %d buys refused for their challenge", s.Errors, s.ChallengeErrors))
	}
	if r.Agree != nil {
		check(*r.Agree, "Redis and the database agree ("+r.AgreeNote+")", "Redis and the database DISAGREE ("+r.AgreeNote+")")
	}
	return b.String()
}

// solveTable writes the sale's solves: what a buyer waited to solve its
// challenge on this machine, the work it did, and the maxnumbers asked.
func solveTable(w io.Writer, reports []*Report) {
	fmt.Fprintln(w, "Challenges, solved in Go before each buy by every buyer at once on this machine's cores (solve: wall time;")
	fmt.Fprintln(w, "hashes: numbers tried, the work whatever the device; get: GET /api/vouchers/{id}/challenge):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tconns\tsolved\tsolve mean\tp50\tp99\tmax\thashes mean\tp99\tmax\tget p50\tget p99\tmaxnumber seen\trefused\t")
	for _, r := range reports {
		v := r.Solves
		if v == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.Label, r.Connections, v.Solved,
			ms(v.Mean), ms(v.P50), ms(v.P99), ms(v.Max), thousands(v.HashesMean), thousands(float64(v.HashesP99)), thousands(float64(v.HashesMax)),
			ms(v.FetchP50), ms(v.FetchP99), maxNumbers(v.MaxNumbers), r.ChallengeErrors)
	}
	tw.Flush()
}

// maxNumbers formats the maxnumbers seen, each with its count when there
// are several.
func maxNumbers(m map[int64]int64) string {
	keys := slices.Sorted(maps.Keys(m))
	if len(keys) == 1 {
		return thousands(float64(keys[0]))
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", thousands(float64(k)), m[k])
	}
	return strings.Join(parts, ", ")
}
