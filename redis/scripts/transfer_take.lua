#!lua
-- transfer_take: the first step of a transfer of stock between two shards
-- of a sharded voucher: take up to n units from this shard, the donor, for
-- the receiver, and record the transfer under its id until it is settled
-- (transfer_settle.lua). The units are then in flight: in neither shard's
-- stock, in this shard's xout.
--
-- Nothing is taken from a shard not loaded (or loaded for another
-- generation), while a rebuild counts the voucher's shards (now < xfrozen),
-- or from a shard whose transfer generation is not the caller's: a rebuild
-- reset the transfers since the caller read it.
--
-- KEYS[1] stock   string: units left to admit on this shard
-- KEYS[2] meta    hash: begin, end, gen; xgen (the transfer generation,
--                 absent = "0"); xfrozen (unix ms)
-- KEYS[3] xout    hash: transfer id -> "<to index>:<n>:<unix ms>:<xgen>"
-- ARGV[1] transfer id
-- ARGV[2] the receiver's shard index
-- ARGV[3] n, how many units to take at most (> 0)
-- ARGV[4] the voucher's generation
-- ARGV[5] the transfer generation the caller read on both shards
--
-- Returns m >= 0, the units taken (min(n, stock); 0: none left, nothing
-- recorded); the same m again for an id already taken; or
--   -1  not loaded, or loaded for another generation
--   -2  frozen: a rebuild is counting the shards
--   -3  the shard's transfer generation is not ARGV[5]
local done = redis.call('HGET', KEYS[3], ARGV[1])
if done then
  local _, _, n = string.find(done, '^[^:]*:(%d+):')
  return tonumber(n)
end
local stock = redis.call('GET', KEYS[1])
local meta = redis.call('HMGET', KEYS[2], 'begin', 'end', 'gen', 'xgen', 'xfrozen')
if not stock or not meta[1] or not meta[2] or (meta[3] or '0') ~= ARGV[4] then
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if meta[5] and now < tonumber(meta[5]) then
  return -2
end
if (meta[4] or '0') ~= ARGV[5] then
  return -3
end
local m = math.min(tonumber(ARGV[3]), tonumber(stock))
if m <= 0 then
  return 0
end
redis.call('DECRBY', KEYS[1], m)
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2] .. ':' .. m .. ':' .. now .. ':' .. ARGV[5])
return m
