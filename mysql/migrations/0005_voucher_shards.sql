-- A voucher's shards: how many parts its stock is split into in the cache
-- (seckill.Voucher.Shards, 1 to 64), and the hash tags placement chose for
-- them on a Cluster, joined by ',' ('' when it chose none: the default tags
-- v<id>.<i>). 1 and '' for vouchers made before: unsharded, their keys
-- {v<id>} as they always were.
--
-- One statement: MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB has), and
-- each statement commits on its own, so two would leave half a migration
-- when the second fails.

ALTER TABLE vouchers
    ADD COLUMN shards     INT           NOT NULL DEFAULT 1,
    ADD COLUMN shard_tags VARCHAR(4000) NOT NULL DEFAULT '';
