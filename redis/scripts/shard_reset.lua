#!lua
-- shard_reset: reset the transfers of a shard of a sharded voucher that is
-- being rebuilt (after rebuild_begin, before finish_rebuild): its record of
-- the transfers it gave and received goes (the rebuild counts the shard
-- from the database, and the transfers in flight from the shards that kept
-- their data), and it takes the rebuild's transfer generation, so that a
-- transfer begun before the rebuild is refused here and given back to its
-- donor, never applied (docs/design/shards.md, Shards). Its meta names its place
-- among the voucher's shards.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: gen, epoch, shards, index, xgen
-- KEYS[3] xout    hash: the transfers this shard gave
-- KEYS[4] xin     hash: the transfers this shard received or refused
-- ARGV[1] the voucher's generation
-- ARGV[2] the rebuild's epoch (from rebuild_begin)
-- ARGV[3] the rebuild's transfer generation (twenty digits, later ones
--         larger), set if it is later than the shard's
-- ARGV[4] how many shards the voucher has
-- ARGV[5] this shard's index
--
-- Returns 1 if reset, 0 if the shard has a stock already (someone else
-- finished its rebuild: stop), -1 if the rebuild was superseded (start
-- over).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if (redis.call('HGET', KEYS[2], 'gen') or '0') ~= ARGV[1] or (redis.call('HGET', KEYS[2], 'epoch') or '0') ~= ARGV[2] then
  return -1
end
redis.call('UNLINK', KEYS[3], KEYS[4])
local xgen = redis.call('HGET', KEYS[2], 'xgen') or '0'
if #ARGV[3] > #xgen or (#ARGV[3] == #xgen and ARGV[3] > xgen) then
  xgen = ARGV[3]
end
redis.call('HSET', KEYS[2], 'shards', ARGV[4], 'index', ARGV[5], 'xgen', xgen)
return 1
