package bench

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOutageDuringSale: the outage's Down comes at its time into the sale
// and Up its length later, before the sale ends and the books are
// checked; the report says when, and carries the proxy's measured
// addition, before and during the sale, into the text.
func TestOutageDuringSale(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer((&fakeShop{}).handler())
	defer srv.Close()
	var (
		mu       sync.Mutex
		down, up time.Time
	)
	added := Added{Asked: time.Millisecond, Median: 1100 * time.Microsecond, P99: 1300 * time.Microsecond, Samples: 10}
	probed := make(chan struct{})
	start := time.Now()
	r, err := Run(context.Background(), Config{
		URL: srv.URL, Label: "fake", Users: 200, Stock: 50, Concurrency: 4, Duration: 400 * time.Millisecond,
		Token:        func(id int64, admin bool) (string, error) { return strconv.FormatInt(id, 10), nil },
		ReferenceFor: -1, SoldOutFor: -1, DrainTimeout: time.Second,
		DBLatency: &added,
		DBLatencyProbe: func(context.Context) (Added, error) {
			close(probed)
			return added, nil
		},
		Outage: &Outage{At: 150 * time.Millisecond, For: 100 * time.Millisecond,
			Down: func() { mu.Lock(); down = time.Now(); mu.Unlock() },
			Up:   func() { mu.Lock(); up = time.Now(); mu.Unlock() },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	<-probed
	o := r.DBOutage
	if o == nil || down.IsZero() || up.IsZero() {
		t.Fatalf("outage %+v, down at %v, up at %v: want both called and reported", o, down, up)
	}
	if o.Down < 150*time.Millisecond || o.Up-o.Down < 100*time.Millisecond || down.Sub(start) < 150*time.Millisecond || up.Sub(down) < 100*time.Millisecond {
		t.Errorf("outage %+v (down %v, up %v after the run began): want down 150ms into the sale, for 100ms", o, down.Sub(start), up.Sub(start))
	}
	if r.DBLatency == nil || *r.DBLatency != added || r.DBLatencyUnderLoad == nil || *r.DBLatencyUnderLoad != added {
		t.Errorf("the report's added round trip %v, during the sale %v; want %v both", r.DBLatency, r.DBLatencyUnderLoad, added)
	}
	var b strings.Builder
	Table(&b, []*Report{r})
	for _, want := range []string{"adds 1.1ms median, 1.3ms p99", "during the sale", "the database was unreachable from"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
}
