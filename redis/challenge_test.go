package redis

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// TestSpendChallenge: a challenge is spent once, under the voucher's hash
// tag (on a Cluster too), its key expiring with the challenge; another
// challenge, or the same one under another shard's tag, is apart.
func TestSpendChallenge(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		const hash = "c2fc6c6adf8ba0f575a35f48df52c0968a3dcd3c577c2769dc2f1035943b975e"
		spend := func(voucherID int64, challenge string, want bool) {
			t.Helper()
			if fresh, err := c.SpendChallenge(ctx, &seckill.Voucher{ID: voucherID}, 1, challenge, time.Minute); err != nil || fresh != want {
				t.Errorf("SpendChallenge(voucher %d, %s…) = %v, %v; want %v", voucherID, challenge[:8], fresh, err, want)
			}
		}
		spend(7, hash, true)
		spend(7, hash, false)
		spend(7, "751a512dc299d1193434e6d7065f64d90e5bef33ab45ab841fb7231ecef3fa5a", true)
		spend(8, hash, true)
		key := c.keys.challenge("v7", hash)
		if key != c.keys.prefix+":{v7}:challenge:"+hash {
			t.Errorf("key %q: want it under the voucher's hash tag", key)
		}
		ms, err := do(t, c, "PTTL", key).AsInt64()
		if err != nil || ms <= 0 || ms > time.Minute.Milliseconds() {
			t.Errorf("PTTL of a spent challenge = %d, %v; want within a minute", ms, err)
		}
	})
}
