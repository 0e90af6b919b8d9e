#!lua
-- return_unit: give the unit of a cancelled order back to the stock, on
-- its buyer's home shard, once per order: only while the buyer's slot holds
-- that very order, which this script then frees, so that a second call (a
-- sweeper, the buyer and a retry racing, or a repeat) finds it freed and
-- does nothing. The database cancelled the order first (it takes the unit
-- back in the same transaction); this is the cache's side.
--
-- KEYS[1] stock     string: units left to admit
-- KEYS[2] buyers    hash: user id -> order id
-- KEYS[3] cancelled hash: user id -> cancelled order id (admit.lua
--                   refuses such a buyer)
-- KEYS[4] meta      hash: gen, dropped; ver, held and drained, kept as
--                   release.lua and transfer_give.lua keep them
-- KEYS[5] changes   list: the log of ver, kept as release.lua keeps it
-- KEYS[6] returned  set: order ids of a rebuy voucher's cancelled orders
--                   (stage_buyers.lua, stage_queued.lua and
--                   count_persisted.lua skip them; admit.lua never reads it)
-- ARGV[1] user id
-- ARGV[2] order id
-- ARGV[3] '1' if the voucher lets a buyer buy again after a cancellation
--         (the slot is only freed), '0' to keep it as cancelled
-- ARGV[4] the voucher's generation
-- ARGV[5] how long a unit given back to a sold-out voucher is held, ms
-- ARGV[6] how many entries KEYS[5] keeps
-- ARGV[7] how long KEYS[5] is kept after its last entry, ms
--
-- The slot keeps the order as cancelled (KEYS[3]) unless ARGV[3] frees it:
-- a cancelled buyer buying again would be a scripted hoarder's way to hold
-- a unit for ever, one deadline after another. A freed slot records
-- nothing a buyer's next admission would find, so the order id goes into
-- KEYS[6] instead, whatever the slot holds (the order is cancelled in the
-- database, for good): a rebuild that finds the order's stream entry
-- (acknowledged, not yet trimmed) or a page of the database read before
-- the cancellation, or a late count of persisted orders, would otherwise
-- count it as holding a unit again, and lock its buyer out with it.
--
-- ver, changes and held are kept as release.lua keeps them, for the same
-- reason (the instances' copies of a sold-out voucher's buyers must drop
-- the buyer, and no copy may answer alone after the unit is sold again);
-- and a shard marked drained is held, and drained no more, as
-- transfer_give.lua does it: a unit given back after the sell-out must not
-- be sold before every copy trusted before has lapsed.
--
-- While the voucher has no stock (unloaded, or being rebuilt), the slot
-- alone changes: the rebuild sets the stock from the buyers it finds. A
-- free slot is marked cancelled all the same (or the order returned,
-- KEYS[6]), with or without a stock: one a rebuild has not staged yet (its
-- page of the database may have been read before the cancellation), or
-- one Redis never held (the order persisted after Redis lost data and the
-- voucher was rebuilt), so that stage_buyers.lua, stage_queued.lua and a
-- late count_persisted.lua do not count the order as a buyer's: its unit
-- stays in the stock. State of another generation, a dropped voucher, or
-- none at all is left alone: the rebuild reads the database, where the
-- order is cancelled already.
--
-- Returns 1 if the unit was given back (to the stock, or to the rebuild's
-- count), 0 if the slot does not hold that order (given back before, or
-- rebuilt without it): nothing given.
if redis.call('EXISTS', KEYS[4]) == 0 then
  return 0
end
local meta = redis.call('HMGET', KEYS[4], 'gen', 'dropped', 'drained')
if (meta[1] or '0') ~= ARGV[4] or meta[2] then
  return 0
end
local slot = redis.call('HGET', KEYS[2], ARGV[1])
local stock = redis.call('GET', KEYS[1])
if ARGV[3] == '1' then
  redis.call('SADD', KEYS[6], ARGV[2])
end
if slot ~= ARGV[2] then
  if ARGV[3] ~= '1' then
    -- Marked whatever the slot holds (nothing, or another admission of
    -- the buyer, which the database refuses: a no-rebuy buyer with a
    -- cancelled order holds no other), so that no late count or rebuild
    -- takes this order's unit again.
    redis.call('HSETNX', KEYS[3], ARGV[1], ARGV[2])
  end
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[3] ~= '1' then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
end
if not stock then
  return 1
end
redis.call('HINCRBY', KEYS[4], 'ver', 1)
redis.call('RPUSH', KEYS[5], redis.call('HGET', KEYS[4], 'ver') .. ':' .. ARGV[1])
redis.call('LTRIM', KEYS[5], -tonumber(ARGV[6]), -1)
redis.call('PEXPIRE', KEYS[5], ARGV[7])
redis.call('INCR', KEYS[1])
if tonumber(stock) == 0 or meta[3] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[4], 'held', tostring(now + tonumber(ARGV[5])))
  if meta[3] then
    redis.call('HDEL', KEYS[4], 'drained')
  end
end
return 1
