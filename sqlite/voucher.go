package sqlite

import (
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/sqlrows"
)

const voucherColumns = `id, title, stock, initial_stock, begin_time, end_time, created_at, generation, shards, shard_tags, pay_within_seconds, rebuy_after_cancel, challenge, challenge_lead_seconds, paused`

// scanVoucher reads the voucherColumns of one row.
func scanVoucher(row sqlrows.Scanner) (*seckill.Voucher, error) {
	var (
		v                     seckill.Voucher
		begin, end, createdAt int64
		tags                  string
		payWithin             int64
		lead                  int64
	)
	if err := row.Scan(&v.ID, &v.Title, &v.Stock, &v.InitialStock, &begin, &end, &createdAt, &v.Generation, &v.Shards, &tags, &payWithin, &v.RebuyAfterCancel, &v.Challenge, &lead, &v.Paused); err != nil {
		return nil, err
	}
	v.BeginTime, v.EndTime, v.CreatedAt = fromMicros(begin), fromMicros(end), fromMicros(createdAt)
	v.ShardTags = seckill.SplitShardTags(tags)
	v.PayWithin = time.Duration(payWithin) * time.Second
	v.ChallengeLead = time.Duration(lead) * time.Second
	return &v, nil
}
