#!lua
-- shard_freeze: stop the transfers of stock in and out of one shard of a
-- sharded voucher for a while, and read what the shard holds at that one
-- instant. A rebuild (or a count of the shards, CountShards) freezes every
-- shard of the voucher, then reads the receivers' xin: no transfer step
-- runs on a frozen shard (meta xfrozen, by this server's clock), so the
-- shards' counts and the transfers in flight between them add up as if
-- read at one instant (docs/design/shards.md, Shards).
--
-- Several may freeze a shard at once: each holds it under its own name
-- (meta 'xhold:<holder>' = until when), xfrozen is the latest of their
-- holds, and shard_thaw ends one hold.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: gen, begin, end, dropped, xgen, xfrozen, xhold:*
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] xout    hash: transfer id -> "<to index>:<n>:<unix ms>:<xgen>"
-- ARGV[1] the voucher's generation
-- ARGV[2] the holder's name (unique per freeze)
-- ARGV[3] a new transfer generation (xgen: twenty digits, later ones
--         larger), set if it is later than the shard's; '' keeps it
-- ARGV[4] how long to hold the shard frozen, ms
--
-- A shard of another generation, or dropped past its retention, is left as
-- it is. A shard of this generation that is not loaded (lost, being
-- rebuilt) is frozen too, so that it stays frozen once rebuilt until the
-- rebuild thaws it.
--
-- Returns {-1} for a shard left as it is; else {loaded, stock, buyers,
-- xgen, id1, transfer1, id2, transfer2, ...}: loaded 1 when it has a stock
-- and a window (else 0, and stock and buyers are 0), xgen the shard's
-- transfer generation after the freeze, then its xout's entries.
if (redis.call('HGET', KEYS[2], 'gen') or '0') ~= ARGV[1] or redis.call('HEXISTS', KEYS[2], 'dropped') == 1 then
  return {-1}
end
local function later(a, b)
  return #a > #b or (#a == #b and a > b)
end
local t = redis.call('TIME')
local untilms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[4])
local xgen = redis.call('HGET', KEYS[2], 'xgen') or '0'
if ARGV[3] ~= '' and later(ARGV[3], xgen) then
  xgen = ARGV[3]
  redis.call('HSET', KEYS[2], 'xgen', xgen)
end
redis.call('HSET', KEYS[2], 'xhold:' .. ARGV[2], tostring(untilms))
if untilms > tonumber(redis.call('HGET', KEYS[2], 'xfrozen') or '0') then
  redis.call('HSET', KEYS[2], 'xfrozen', tostring(untilms))
end
local out = {0, 0, 0, xgen}
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('HEXISTS', KEYS[2], 'begin') == 1 and redis.call('HEXISTS', KEYS[2], 'end') == 1 then
  out[1] = 1
  out[2] = tonumber(redis.call('GET', KEYS[1]))
  out[3] = redis.call('HLEN', KEYS[3])
end
for _, v in ipairs(redis.call('HGETALL', KEYS[4])) do
  out[#out + 1] = v
end
return out
