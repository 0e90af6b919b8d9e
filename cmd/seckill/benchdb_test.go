package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestBenchDBLatencyRefused: --db-latency and --db-outage are refused,
// before anything opens, where no proxy can stand in front of the
// database: the embedded default, SQLite, a remote server; and an outage
// needs a timed sale.
func TestBenchDBLatencyRefused(t *testing.T) {
	real := []string{"--redis-url", "redis://127.0.0.1:1", "--db-url", "mysql://root@127.0.0.1:1/none"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--db-latency", "1ms"}, "not the embedded default"},
		{[]string{"--db-latency", "1ms", "--redis-url", "redis://127.0.0.1:1", "--db-url", "sqlite:///tmp/x.db"}, "not --db-url sqlite://"},
		{append([]string{"--db-latency", "1ms", "--url", "http://127.0.0.1:1"}, real...), "with --url the server is another process"},
		{append([]string{"--db-outage", "5s"}, real...), "needs a sale of a set time (--duration)"},
		{append([]string{"--db-latency", "-1ms"}, real...), "want 0 or more"},
	} {
		err := runBench(context.Background(), tc.args, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("seckill bench %s: %v; want an error saying %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
