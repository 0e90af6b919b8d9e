package redis

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/testenv"
)

// scriptLoads returns how many SCRIPT LOADs the server ran since its
// statistics were reset.
func scriptLoads(t *testing.T, p *testenv.RedisProc) string {
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
	p := testenv.StartRedisProc(t)
	ctx := context.Background()
	c, err := Open(ctx, Config{URL: "redis://" + p.Addr + "/0"}, testLogger(t))
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
	if n := scriptLoads(t, p); n != "1" {
		t.Errorf("ArmAdmission for this server ran SCRIPT LOAD %s times, want once", n)
	}
	mustLoad(t, c, onSale(1, 5))
	mustAdmit(t, c, 1, 1, 1)
}
