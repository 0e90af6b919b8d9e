package http

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill/seckill/internal/testenv"
	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: this package's
// and package http_test's, which run in the same test binary.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakIgnores()...)
}

var testSecret = []byte("test-secret-0123456789abcdef-0123456789")

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// response is an answer, its body decoded loosely for assertions.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// metricIn returns the value of series in a /metrics text, or fails t.
func metricIn(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	e.wantError(e.do("GET", "/api/nothing", "", nil), 404, "not_found")
	res := e.do("DELETE", "/api/vouchers/1", "", nil)
	e.wantError(res, 405, "method_not_allowed")
	if allow := res.header.Get("Allow"); !strings.Contains(allow, "GET") {
		t.Errorf("405 answer has Allow %q, want it to list GET", allow)
	}
}
