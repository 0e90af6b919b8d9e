#!lua
-- transfer_give: the second step of a transfer of stock between two shards
-- of a sharded voucher, on the receiver: add the n units taken from the
-- donor (transfer_take.lua) to this shard's stock, once per transfer id;
-- or refuse the transfer for good (cancel), so that the donor takes its
-- units back (transfer_settle.lua). Whichever comes first is recorded and
-- answered ever after: a transfer is received or refused, never both.
--
-- A transfer is received only by a shard loaded for the voucher's
-- generation whose transfer generation is still the transfer's: one that
-- a rebuild reset since (or that was lost) cannot take it, and its
-- finisher cancels it. Nothing runs while a rebuild counts the shards
-- (now < xfrozen); what a transfer already is, is answered all the same.
--
-- Units given to a shard marked drained (every shard was found at 0 with
-- nothing in flight: the voucher sold out, redis/soldout.go) are held, as
-- release.lua holds a unit given back: an instance's copy of the shard's
-- buyers that found it at 0 answers alone for less than the hold
-- (docs/design/soldout.md, Sold-out copies). The shard is then no longer drained:
-- the hold covers every copy trusted before, and a unit given back after
-- the sell-out must not hop from shard to shard, held again at each, while
-- buyers ask for it.
--
-- KEYS[1] stock   string: units left to admit on this shard
-- KEYS[2] meta    hash: begin, end, gen; xgen (absent = "0"); xfrozen;
--                 drained; held (unix ms)
-- KEYS[3] xin     hash: transfer id -> "<n>" received, "x" refused
-- ARGV[1] transfer id
-- ARGV[2] n, the units the donor took
-- ARGV[3] the voucher's generation
-- ARGV[4] the transfer's transfer generation (its xout entry's)
-- ARGV[5] 'give' to receive it, 'cancel' to refuse it for good
-- ARGV[6] how long units given to a drained shard are held, ms
--
-- Returns n > 0 if this shard received the transfer (now or before), or
--   -1  refused for good (now, or before)
--   -2  frozen: nothing done; try again after the rebuild
--   -3  this shard cannot receive it (not loaded, another generation or
--       another transfer generation): nothing done; cancel it
local done = redis.call('HGET', KEYS[3], ARGV[1])
if done == 'x' then
  return -1
elseif done then
  return tonumber(done)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local meta = redis.call('HMGET', KEYS[2], 'begin', 'end', 'gen', 'xgen', 'xfrozen', 'drained')
if meta[5] and now < tonumber(meta[5]) then
  return -2
end
if ARGV[5] == 'cancel' then
  redis.call('HSET', KEYS[3], ARGV[1], 'x')
  return -1
end
local stock = redis.call('GET', KEYS[1])
if not stock or not meta[1] or not meta[2] or (meta[3] or '0') ~= ARGV[3] or (meta[4] or '0') ~= ARGV[4] then
  return -3
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('INCRBY', KEYS[1], ARGV[2])
if meta[6] then
  redis.call('HSET', KEYS[2], 'held', tostring(now + tonumber(ARGV[6])))
  redis.call('HDEL', KEYS[2], 'drained')
end
return tonumber(ARGV[2])
