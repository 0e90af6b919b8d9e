// Package deploy holds the files to watch seckill in production: the
// Prometheus alerting rules and scrape configuration, and a Grafana
// dashboard. Its test checks them against the metrics the service exposes.
package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/seckill/seckill/monitor/monitortest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// exposed returns every metric name a running service exposes after a
// small sale (with a dead letter, so that every series exists), each with
// its label names. A histogram's series are name_bucket (with le),
// name_sum and name_count.
func exposed(t *testing.T) map[string][]string {
	t.Helper()
	s := monitortest.Start(t, monitortest.Options{HoldWorkers: true})
	v := s.Voucher(5)
	s.Run(v.ID, 1, 8, 2)
	s.DeadLetter(s.Deliver(v.ID, "held", 1)[0])
	s.StartWorkers()
	s.WaitCreated(v.ID, 4)

	// serve registers the Go and process collectors too.
	runtime := prometheus.NewRegistry()
	runtime.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	families, err := prometheus.Gatherers{s.Registry, runtime}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{}
	for _, f := range families {
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		name := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"] = append(slices.Clone(labels), "le")
			names[name+"_sum"], names[name+"_count"] = labels, labels
		case dto.MetricType_SUMMARY:
			names[name] = append(slices.Clone(labels), "quantile")
			names[name+"_sum"], names[name+"_count"] = labels, labels
		default:
			names[name] = labels
		}
	}
	return names
}

// alertExprs returns the expressions of alerts.yml by alert name. The file
// writes each as `expr: <one line>` or `expr: |` and indented lines.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	lines := strings.Split(string(raw), "\n")
	var alert string
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if name, ok := strings.CutPrefix(line, "- alert:"); ok {
			alert = strings.TrimSpace(name)
			continue
		}
		rest, ok := strings.CutPrefix(line, "expr:")
		if !ok {
			continue
		}
		if rest = strings.TrimSpace(rest); rest != "|" && rest != ">" {
			exprs[alert] = rest
			continue
		}
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
		var block []string
		for i+1 < len(lines) {
			next := lines[i+1]
			if strings.TrimSpace(next) != "" && len(next)-len(strings.TrimLeft(next, " ")) <= indent {
				break
			}
			block = append(block, strings.TrimSpace(next))
			i++
		}
		exprs[alert] = strings.Join(block, " ")
	}
	if len(exprs) == 0 {
		t.Fatal("no alert expressions found in alerts.yml")
	}
	return exprs
}

// dashboardExprs returns the queries of the dashboard, by where they are.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("grafana/seckill.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			GridPos struct {
				X, W int
			} `json:"gridPos"`
			Datasource struct{ UID string } `json:"datasource"`
			Targets    []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana/seckill.json: %v", err)
	}
	exprs := map[string]string{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q is wider than the dashboard", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: %d queries, data source %q; want queries on ${datasource}", p.Title, len(p.Targets), p.Datasource.UID)
		}
		for _, q := range p.Targets {
			exprs["panel "+p.Title+" "+q.RefID] = q.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			exprs["variable "+v.Name] = v.Definition
		}
	}
	return exprs
}

var (
	// metricName matches the metric names the service exposes: its own
	// and the Go and process collectors'.
	metricName = regexp.MustCompile(`\b(?:seckill|go|process)_[a-z0-9_]+\b`)
	// selector matches a metric name with its label matchers.
	selector = regexp.MustCompile(`\b((?:seckill|go|process)_[a-z0-9_]+)\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	// grouping matches by (…), without (…), on (…), ignoring (…) and
	// label_values(metric, label).
	grouping    = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	labelValues = regexp.MustCompile(`label_values\(\s*[a-z0-9_]+\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
)

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"instance", "job"}

// TestMetricsExist fails when the alert rules or the dashboard name a
// metric, or a label of one, that the service does not expose.
func TestMetricsExist(t *testing.T) {
	names := exposed(t)
	check := func(where, expr string) {
		t.Helper()
		used := metricName.FindAllString(expr, -1)
		if len(used) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		var labels []string
		for _, name := range used {
			l, ok := names[name]
			if !ok {
				t.Errorf("%s: metric %s is not exposed by the service", where, name)
			}
			labels = append(labels, l...)
		}
		for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
			for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
				if !slices.Contains(names[sel[1]], m[1]) && !slices.Contains(targetLabels, m[1]) {
					t.Errorf("%s: %s has no label %q", where, sel[1], m[1])
				}
			}
		}
		var grouped []string
		for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
			grouped = append(grouped, strings.Split(g[1], ",")...)
		}
		for _, g := range labelValues.FindAllStringSubmatch(expr, -1) {
			grouped = append(grouped, g[1])
		}
		for _, l := range grouped {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
				t.Errorf("%s: groups by %q, a label none of %v has", where, l, used)
			}
		}
	}
	for alert, expr := range alertExprs(t) {
		check("alert "+alert, expr)
	}
	for where, expr := range dashboardExprs(t) {
		check(where, expr)
	}
}

// TestAlertsTested: alerts_test.yml checks each alert both firing and not
// firing (promtool runs the tests, in .ci/run).
func TestAlertsTested(t *testing.T) {
	raw, err := os.ReadFile("prometheus/alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	silent := regexp.MustCompile(`alertname: (\w+)\s*\n\s*exp_alerts: \[\]`)
	firing := regexp.MustCompile(`alertname: (\w+)\s*\n\s*exp_alerts:\s*\n\s*- exp_labels:`)
	has := func(re *regexp.Regexp, alert string) bool {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			if m[1] == alert {
				return true
			}
		}
		return false
	}
	for alert := range alertExprs(t) {
		if !has(firing, alert) {
			t.Errorf("alerts_test.yml never expects %s to fire", alert)
		}
		if !has(silent, alert) {
			t.Errorf("alerts_test.yml never expects %s to stay silent", alert)
		}
	}
}

// TestNginxExample checks nginx/nginx.conf: it keeps what nginx/README.md
// promises of it, and `nginx -t` accepts it with the three upstream
// addresses and the listen port replaced, as cmd/seckill's
// TestThreeInstancesBehindNginx runs it. Without nginx the second part
// skips, or fails with CI set.
func TestNginxExample(t *testing.T) {
	raw, err := os.ReadFile("nginx/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(raw)
	for _, want := range []string{
		"keepalive 64;",
		"proxy_http_version 1.1;",
		`proxy_set_header Connection "";`,
		"proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
		"proxy_next_upstream error timeout non_idempotent;",
		"max_fails=1 fail_timeout=5s;",
		"zone seckill 64k;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("nginx/nginx.conf lacks %q", want)
		}
	}
	// non_idempotent only for the buy: nowhere else is a POST safe to send
	// twice.
	if n := strings.Count(conf, "non_idempotent;"); n != 1 {
		t.Errorf("nginx/nginx.conf has non_idempotent %d times, want once (the buy's location)", n)
	}

	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			msg := "nginx is not installed: " + err.Error()
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		bin = "/usr/sbin/nginx"
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	repl := map[string]string{"listen 80;": "listen " + freeAddr(t) + ";"}
	for i := range 3 {
		repl[fmt.Sprintf("server 10.0.0.%d:8080 ", 11+i)] = "server " + freeAddr(t) + " "
	}
	for from, to := range repl {
		if n := strings.Count(conf, from); n != 1 {
			t.Fatalf("nginx/nginx.conf holds %q %d times, want once: the tests replace it", from, n)
		}
		conf = strings.Replace(conf, from, to, 1)
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-t", "-p", dir, "-c", path, "-e", filepath.Join(dir, "logs", "error.log")).CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
