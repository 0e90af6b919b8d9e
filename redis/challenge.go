package redis

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill/seckill"
)

var _ seckill.ChallengeSpender = (*Client)(nil)

// SpendChallenge marks the challenge (its lowercase hex hash) of the
// buyer's buy of v as used, for ttl, with one SET NX PX under the hash tag
// of the buyer's home shard (where they are admitted), and reports whether
// it was fresh: of many presentations of one solution, here or at other
// instances, exactly one gets true. The key expires with the challenge: an
// expired solution is refused without it.
func (c *Client) SpendChallenge(ctx context.Context, v *seckill.Voucher, userID int64, challenge string, ttl time.Duration) (bool, error) {
	tag := v.ShardTag(seckill.HomeShard(userID, v.ShardCount()))
	ms := max(ttl.Milliseconds(), 1)
	err := c.rdb.Do(ctx, c.rdb.B().Set().Key(c.keys.challenge(tag, challenge)).Value("1").Nx().PxMilliseconds(ms).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, redisErr("spend a challenge", err)
	}
	return true, nil
}
