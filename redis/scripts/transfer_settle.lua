#!lua
-- transfer_settle: the last step of a transfer of stock between two shards
-- of a sharded voucher, on the donor, once the receiver has answered
-- (transfer_give.lua): drop the transfer's record; if the receiver refused
-- it, give its units back to this shard's stock first (if the shard is
-- loaded: a shard rebuilt since has its stock counted afresh). Once per
-- transfer id: a transfer settled is no longer recorded. Nothing runs while
-- a rebuild counts the shards (now < xfrozen). Units given back to a shard
-- marked drained are held, and the shard no longer drained, as
-- transfer_give.lua does.
--
-- KEYS[1] stock   string: units left to admit on this shard
-- KEYS[2] meta    hash: xfrozen (unix ms); drained; held (unix ms)
-- KEYS[3] xout    hash: transfer id -> "<to index>:<n>:<unix ms>:<xgen>"
-- ARGV[1] transfer id
-- ARGV[2] '1' if the receiver received it, '0' if it refused it
-- ARGV[3] how long units given back to a drained shard are held, ms
--
-- Returns 0 if the transfer is not recorded (settled already, or lost with
-- the shard), 1 if settled as received, 2 if settled as refused (its units
-- given back), -2 if frozen (nothing done).
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local meta = redis.call('HMGET', KEYS[2], 'xfrozen', 'drained')
if meta[1] and now < tonumber(meta[1]) then
  return -2
end
redis.call('HDEL', KEYS[3], ARGV[1])
if ARGV[2] == '1' then
  return 1
end
local _, _, n = string.find(rec, '^[^:]*:(%d+):')
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('INCRBY', KEYS[1], n)
  if meta[2] then
    redis.call('HSET', KEYS[2], 'held', tostring(now + tonumber(ARGV[3])))
    redis.call('HDEL', KEYS[2], 'drained')
  end
end
return 2
