package redis

import (
	"context"
	"fmt"
	"testing"
)

// TestAdmitProbeAdmitsNobody: the probe of admission sent with every
// sold-out read finds admission armed, and writes nothing: on a Cluster it
// runs the admission script itself, which must answer "not loaded" on a
// voucher with stock left. (Where admission is not armed:
// soldout.TestSoldOutAnswerAfterOlderRestart.)
func TestAdmitProbeAdmitsNobody(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := onSale(1, 5)
		mustLoad(t, c, v)
		k := c.keys.voucher(1)
		before := map[string]any{"stock": stock(t, c, 1), "meta": hash(t, c, k.Meta), "orders": xlen(t, c, k.Orders)}
		if got, err := c.SoldOutBuyerOrder(ctx, 7, 1); err != nil || got != 0 {
			t.Fatalf("SoldOutBuyerOrder(user 7) = %d, %v; want none", got, err)
		}
		after := map[string]any{"stock": stock(t, c, 1), "meta": hash(t, c, k.Meta), "orders": xlen(t, c, k.Orders)}
		if fmt.Sprint(before) != fmt.Sprint(after) || len(hash(t, c, k.Buyers)) != 0 {
			t.Fatalf("the probe changed the voucher: %v, then %v, buyers %v", before, after, hash(t, c, k.Buyers))
		}
	})
}
