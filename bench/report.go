package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Table writes reports as the seeds' comparison table, one row per run,
// each rate also as a ratio to the first report with the label's mode
// "sync" (if any) and as a fraction of the run's trivial-endpoint ceiling.
func Table(w io.Writer, reports []*Report) {
	var base *Report
	for _, r := range reports {
		if strings.HasPrefix(r.Label, "sync") {
			base = r
			break
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tmax req/s\treq/s\t× sync\t% ceiling\tmean\tp50\tp99\tp99.9\terrors\toversold\tlost\ttwo orders\tdrain\tDB orders/s\tsold-out req/s\t% ceiling\t")
	for _, r := range reports {
		vsSync := "-"
		if base != nil && base.MaxRate > 0 {
			vsSync = fmt.Sprintf("%.1f×", r.MaxRate/base.MaxRate)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%v\t%v\t%v\t%v\t%d\t%d\t%d\t%d\t%v\t%.0f\t%.0f\t%s\t\n",
			r.Label, r.MaxRate, r.Rate, vsSync, percent(r.MaxRate, r.Ceiling),
			ms(r.Mean), ms(r.P50), ms(r.P99), ms(r.P999),
			r.Errors, r.Oversold, r.Lost, r.Doubles, r.Drain.Round(time.Millisecond), r.DrainRate,
			r.SoldOut, percent(r.SoldOut, r.Ceiling))
	}
	tw.Flush()
	for _, r := range reports {
		fmt.Fprintf(w, "%s: ceiling (GET /healthz, same client) %.0f req/s; answers %v", r.Label, r.Ceiling, r.Answers)
		if r.RateUntilSoldOut > 0 && r.RateAfterSoldOut > 0 {
			fmt.Fprintf(w, "; the sale's rate until its first sold_out answer %.0f req/s, after it %.0f req/s (%.2f×)",
				r.RateUntilSoldOut, r.RateAfterSoldOut, r.RateAfterSoldOut/r.RateUntilSoldOut)
		}
		if r.Agree != nil {
			fmt.Fprintf(w, "; Redis and database agree: %v (%s)", *r.Agree, r.AgreeNote)
		}
		fmt.Fprintln(w)
	}
}

func percent(v, of float64) string {
	if of <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*v/of)
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
	check(r.Errors == 0, "every request was answered", fmt.Sprintf("%d requests got no answer", r.Errors))
	if r.Agree != nil {
		check(*r.Agree, "Redis and the database agree ("+r.AgreeNote+")", "Redis and the database DISAGREE ("+r.AgreeNote+")")
	}
	return b.String()
}
