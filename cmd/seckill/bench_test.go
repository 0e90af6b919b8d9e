package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill/seckill/bench"
)

// TestDemo runs the demo and reads its account of the sale: the numbers it
// gives must add up, and every check must pass.
func TestDemo(t *testing.T) {
	code, out, errOut := runCmd(environ{}, "demo", "--users", "300", "--stock", "30")
	if code != 0 {
		t.Fatalf("seckill demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"a flash sale of 30 vouchers, 300 buyers",
		"30 buyers got a voucher",
		"ok   no oversell: 30 orders for a stock of 30",
		"ok   no buyer has two orders",
		"ok   nothing lost: all 30 orders answered 200 are in the database",
		"ok   Redis and the database agree",
		"Act two: 20 vouchers for 12.50 CNY whose buyers must pay within 5s. 6 buyers pay, 4 cancel, 10 let the deadline pass.",
		"6 paid 12.50 CNY each, 75.00 CNY taken; 4 cancelled, and their units are on sale again at once: 4 remaining.",
		"The deadline passed: the sweeper cancelled the 10 unpaid orders, 14 units remaining.",
		"20 new buyers and the 14 whose orders were cancelled clicked again: 14 new buyers got the 14 units back on sale, and none of the cancelled buyers got one.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("a check failed:\n%s", out)
	}
	// clicks = got one + duplicates + sold out: nothing else was answered.
	m := regexp.MustCompile(`(\d+) clicks in .*\n.*(\d+) buyers got a voucher.*\n\s+(\d+) clicks from buyers who already had one.*\n\s+(\d+) clicks came after`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo output does not tell the clicks:\n%s", out)
	}
	n := func(s string) int { v, _ := strconv.Atoi(s); return v }
	if clicks, got, dup, sold := n(m[1]), 30, n(m[3]), n(m[4]); clicks != got+dup+sold || clicks < 600 || clicks > 900 {
		t.Errorf("clicks %d != 30 admitted + %d duplicate + %d sold out (300 buyers clicking 2 or 3 times)", clicks, dup, sold)
	}
}

// TestBenchEmbedded is the CI smoke run of seckill bench: every mode on
// the embedded default, for a moment each; the books must balance and the
// JSON report must say so.
func TestBenchEmbedded(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bench.json")
	code, out, errOut := runCmd(environ{}, "bench", "--compare", "sync,queue,stream", "--users", "200", "--repeat", "2",
		"--references", "300ms", "--sold-out", "300ms", "--concurrency", "16", "--json", file)
	if code != 0 {
		t.Fatalf("seckill bench: exit %d\n%s\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var reports []*bench.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		t.Fatal(err)
	}
	if len(reports) != 3 {
		t.Fatalf("%d reports, want 3", len(reports))
	}
	for i, mode := range []string{"sync", "queue", "stream"} {
		r := reports[i]
		if r.Label != mode+"/embedded" || !r.OK() || r.Admitted != 20 || r.Created != 20 || r.Requests != 400 || r.Bare <= 0 || r.Healthz <= 0 {
			t.Errorf("report %d: %+v", i, r)
		}
		// The bare handler answers as many bytes, of the same type, as
		// the server's real sold-out answer.
		if r.SoldOutAnswer.Bytes == 0 || r.BareAnswer != r.SoldOutAnswer {
			t.Errorf("%s: the bare handler answered %+v, the server's sold-out answer was %+v", r.Label, r.BareAnswer, r.SoldOutAnswer)
		}
		if len(r.Phases) == 0 || len(r.Phases[0].CPU) == 0 || r.Phases[0].Name != "bare" {
			t.Errorf("%s: phases %+v, want the bare handler's first, with the CPU of this process", r.Label, r.Phases)
		}
	}
	for _, want := range []string{"best second", "× bare", "× sync", "stream/embedded", "ok   nothing lost", "server beyond bare"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
}

// TestBenchOpenLoopEmbedded is the CI smoke run of bench's open loop: the
// admissions' maximum, then steps at fractions of it, each sent to the
// server and to the bare handler.
func TestBenchOpenLoopEmbedded(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bench.json")
	code, out, errOut := runCmd(environ{}, "bench", "--users", "100", "--references", "200ms", "--sold-out", "0",
		"--concurrency", "8", "--rate", "auto", "--rate-steps", "20,80", "--rate-for", "300ms", "--json", file)
	if code != 0 {
		t.Fatalf("seckill bench: exit %d\n%s\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var reports []*bench.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		t.Fatal(err)
	}
	o := reports[0].Open
	if o == nil || o.MaxRate <= 0 || len(o.Steps) != 2 {
		t.Fatalf("open loop %+v", o)
	}
	for _, s := range o.Steps {
		if s.Server.Sent != s.Server.Scheduled || s.Server.Answers["ok"] != s.Server.Sent || s.Bare.Answers["sold_out"] != s.Bare.Sent {
			t.Errorf("step %v%%: server %+v, bare %+v; want every request sent, admitted by the server, sold out by the bare handler", s.Percent, s.Server, s.Bare)
		}
	}
	for _, want := range []string{"Open loop", "Target:", "open files:"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
}

// TestBenchChallengeEmbedded is the smoke run of bench --challenge: every
// buy solves a challenge of the in-process server's, the books balance,
// the sold-out answers are counted by code, and the start rounds
// alternate a plain voucher and a challenge one, each sent every buy it
// offers.
func TestBenchChallengeEmbedded(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bench.json")
	code, out, errOut := runCmd(environ{}, "bench", "--challenge", "--challenge-min-number", "1000", "--challenge-max-number", "1000",
		"--users", "100", "--repeat", "2", "--references", "0", "--sold-out", "300ms", "--concurrency", "8",
		"--start-rounds", "1", "--start-for", "10s", "--json", file)
	if code != 0 {
		t.Fatalf("seckill bench --challenge: exit %d\n%s\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var reports []*bench.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		t.Fatal(err)
	}
	r := reports[0]
	// Each of the 200 buys either solved its challenge and was sent, or
	// was told at the challenge route, without a challenge to solve, that
	// the voucher is sold out or that the buyer holds an order.
	told := r.Answers[challengeKey("sold_out")] + r.Answers[challengeKey("duplicate_order")]
	if r.Label != "stream/embedded/challenge" || !r.OK() || r.Admitted != 10 || r.Created != 10 || r.Requests+told != 200 || r.ChallengeErrors != 0 {
		t.Fatalf("report %+v", r)
	}
	if s := r.Solves; s == nil || s.Solved != r.Requests || len(s.MaxNumbers) != 1 || s.MaxNumbers[1000] != r.Requests {
		t.Errorf("solves %+v: want %d of maxnumber 1,000", s, r.Requests)
	}
	// Asked without a solution after the sell-out: sold_out, all of them,
	// also once the server's memory of the sell-out lapsed (a buy without a
	// solution renews it from the stock).
	for _, p := range r.Phases {
		if p.Name == "sold-out" && (p.Requests == 0 || p.Errors != 0 || len(r.SoldOutOther) != 0) {
			t.Errorf("the sold-out answers, asked without a solution: %+v; other answers %v", p, r.SoldOutOther)
		}
	}
	st := r.Start
	if st == nil || len(st.Rounds) != 2 || st.Rounds[0].Challenge || !st.Rounds[1].Challenge {
		t.Fatalf("start rounds %+v", st)
	}
	for _, round := range st.Rounds {
		told := round.Answers[challengeKey("sold_out")] + round.Answers[challengeKey("duplicate_order")]
		if round.Sent+told != 200 || round.Answers["ok"] != 10 || round.Errors != 0 || round.Challenge != (round.Verified >= 10) || (!round.Challenge && told != 0) {
			t.Errorf("round %+v: want 200 buys sent or told at the challenge route, 10 admitted", round)
		}
	}
	for _, want := range []string{"Challenges, solved in Go", "arrivals of buy requests per 100 ms", "ok   no buy refused for its challenge"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
}

// challengeKey is the bench's answer key of the challenge route's answer
// code (bench.challengeAnswer).
func challengeKey(code string) string { return "challenge:" + code }

func TestBenchFlags(t *testing.T) {
	for _, tc := range []struct {
		b       benchFlags
		conns   []int
		rate    float64
		steps   []float64
		wantErr bool
	}{
		{b: benchFlags{concurrency: 64}, conns: []int{64}},
		{b: benchFlags{concurrency: 64, connections: "64, 5000"}, conns: []int{64, 5000}},
		{b: benchFlags{concurrency: 64, connections: "0"}, wantErr: true},
		{b: benchFlags{concurrency: 64, rate: "2500"}, conns: []int{64}, rate: 2500},
		{b: benchFlags{concurrency: 64, rate: "auto", rateSteps: "50,80,95"}, conns: []int{64}, steps: []float64{0.5, 0.8, 0.95}},
		{b: benchFlags{concurrency: 64, rate: "fast"}, conns: []int{64}, wantErr: true},
		{b: benchFlags{concurrency: 64, rate: "auto", rateSteps: "50,x"}, conns: []int{64}, wantErr: true},
	} {
		conns, err1 := tc.b.connectionCounts()
		rate, steps, err2 := tc.b.openLoop()
		if gotErr := err1 != nil || err2 != nil; gotErr != tc.wantErr {
			t.Errorf("%+v: errors %v, %v; want an error: %v", tc.b, err1, err2, tc.wantErr)
			continue
		}
		if !tc.wantErr && (!slices.Equal(conns, tc.conns) || rate != tc.rate || !slices.Equal(steps, tc.steps)) {
			t.Errorf("%+v: connections %v, rate %v, steps %v; want %v, %v, %v", tc.b, conns, rate, steps, tc.conns, tc.rate, tc.steps)
		}
	}
}
