package redis

import (
	"context"
	"errors"
	"github.com/seckill/seckill/internal/testenv"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/faults"
)

// scriptLoads returns how many SCRIPT LOADs the server ran since its
// statistics were reset.
func scriptLoads(t *testing.T, p *faults.RedisProc) string {
	t.Helper()
	for _, line := range strings.Split(p.Info("commandstats"), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_script|load:"); ok {
			calls, _, _ := strings.Cut(rest, ",")
			return strings.TrimPrefix(calls, "calls=")
		}
	}
	return "0"
}

// TestArmLoadsNothingBeforeTheCheck: ArmAdmission reads the server's
// identity before it loads the admission script, and loads nothing on a
// server that is not the one checked. Loading it first and taking it back
// after (SCRIPT FLUSH) let admissions run on the unchecked server, whose
// data may be older, in between.
func TestArmLoadsNothingBeforeTheCheck(t *testing.T) {
	t.Parallel()
	p := faults.StartRedisProc(t)
	ctx := context.Background()
	c, err := Open(ctx, Config{URL: "redis://" + p.Addr + "/0"}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := p.Do(ctx, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	if err := c.ArmAdmission(ctx, "another/server"); !errors.Is(err, seckill.ErrUnavailable) {
		t.Errorf("ArmAdmission(an identity not the server's) = %v, want ErrUnavailable", err)
	}
	if n := scriptLoads(t, p); n != "0" {
		t.Errorf("ArmAdmission for another server ran SCRIPT LOAD %s times on this one, want none", n)
	}
	// The server checked is armed.
	arm(t, c)
	if n, want := scriptLoads(t, p), strconv.Itoa(len(c.armed())); n != want {
		t.Errorf("ArmAdmission for this server ran SCRIPT LOAD %s times, want %s: once for each armed script (admission's and the transfers')", n, want)
	}
	mustLoad(t, c, onSale(1, 5))
	mustAdmit(t, c, 1, 1, 1)
}

// TestStaleSlots: which slots' data may be older since the check, by how
// the servers changed (see StaleSince).
func TestStaleSlots(t *testing.T) {
	t.Parallel()
	const all = "all"
	for _, tc := range []struct {
		name, fence, now string
		want             string // the stale slot ranges, "" for none, or all
	}{
		{"a single server restarted", "r1/x", "r2/x", all},
		{"no fence yet", "", "0-16383=A", all},
		{"a single server became a Cluster", "r1/x", "0-16383=A", all},
		{"a Cluster became a single server", "0-16383=A", "r1/x", all},
		{"a fence not understood", "0-99=A,junk", "0-16383=A", all},
		{"a reshard between masters that did not change", "0-99=A,100-16383=B", "0-49=A,50-16383=B", ""},
		{"slots in several ranges", "0-99+200-299=A,100-199+300-16383=B", "0-299=A,300-16383=B", ""},
		{"a failover", "0-99=A,100-16383=B", "0-99=A,100-16383=C", "100-16383"},
		{"a failover and a reshard", "0-99=A,100-199=B,200-16383=D", "0-49=A,50-99+200-16383=D,100-199=E", "50-199"},
		{"a new master given slots", "0-16383=A", "0-99=N,100-16383=A", "0-99"},
		{"a master drained and removed", "0-99=N,100-16383=A", "0-16383=A", "0-99"},
		{"slots no master serves", "0-99=A,100-16383=B", "0-99=A,200-16383=B", "100-199"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slots, isAll := staleSlots(tc.fence, tc.now)
			got := ""
			switch {
			case isAll:
				got = all
			case slots != nil:
				var ranges []string
				for s := 0; s < len(slots); s++ {
					if !slots[s] {
						continue
					}
					e := s
					for e+1 < len(slots) && slots[e+1] {
						e++
					}
					ranges = append(ranges, strconv.Itoa(s)+"-"+strconv.Itoa(e))
					s = e
				}
				got = strings.Join(ranges, "+")
			}
			if got != tc.want {
				t.Errorf("staleSlots(%q, %q) = %q, want %q", tc.fence, tc.now, got, tc.want)
			}
		})
	}
}
