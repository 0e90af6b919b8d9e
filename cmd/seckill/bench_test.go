package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill/seckill/bench"
)

// TestDemo runs the demo and reads its account of the sale: the numbers it
// gives must add up, and every check must pass.
func TestDemo(t *testing.T) {
	code, out, errOut := runCmd(environ{}, "demo", "--buyers", "300", "--stock", "30")
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
		"--ceiling", "300ms", "--sold-out", "300ms", "--concurrency", "16", "--json", file)
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
		if r.Label != mode+"/embedded" || !r.OK() || r.Admitted != 20 || r.Created != 20 || r.Requests != 400 || r.Ceiling <= 0 {
			t.Errorf("report %d: %+v", i, r)
		}
	}
	for _, want := range []string{"max req/s", "× sync", "stream/embedded", "ok   nothing lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
}
