package faults

import (
	"net/url"
	"testing"
	"time"

	"github.com/seckill/seckill/bench"
)

// StartLatencyProxy starts a proxy in front of target (host:port) that
// adds d to each round trip, and stops it when the test ends: a database
// or Redis farther away than loopback. It is the bench's proxy (one
// implementation of the delay); its Down and Up cut the service off and
// let it back, as Proxy's do. Addr is where to connect instead of target.
func StartLatencyProxy(t testing.TB, target string, d time.Duration) *bench.LatencyProxy {
	t.Helper()
	p, err := bench.StartLatencyProxy(bench.LatencyConfig{Target: target, Delay: d})
	if err != nil {
		t.Fatalf("latency proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// FarURL starts a latency proxy (StartLatencyProxy) in front of the
// host of rawURL, a database's or Redis's, and returns rawURL with that
// host replaced by the proxy's: the same service, d farther away.
func FarURL(t testing.TB, rawURL string, d time.Duration) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		t.Fatalf("latency proxy: %q names no host: %v", rawURL, err)
	}
	p := StartLatencyProxy(t, u.Host, d)
	u.Host = p.Addr()
	return u.String()
}
