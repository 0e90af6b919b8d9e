#!lua
-- release: give back an admission that will not be kept: the buyer's slot
-- and the stock it took (the queue mode's queue was full, or its order
-- failed); or, for a buyer Redis admitted twice, hand the slot to the order
-- the database holds and keep the stock, which counts that order.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] buyers  hash: user id -> order id
-- KEYS[3] meta    hash: ver, bumped by every change of a slot but an
--                 admission's; held (unix ms)
-- KEYS[4] changes list: "ver:user,…", the slots each bump of ver changed
-- KEYS[5] cancelled hash: user id -> cancelled order id (no rebuy)
-- KEYS[6] returned  set: cancelled orders whose unit went back (rebuy)
-- ARGV[1] user id
-- ARGV[2] order id
-- ARGV[3] order id to leave as the buyer's (keeping the stock), or '' to
--         free the slot and give the stock back
-- ARGV[4] how long a unit given back to a sold-out voucher is held, ms
-- ARGV[5] how many entries KEYS[4] keeps
-- ARGV[6] how long KEYS[4] is kept after its last entry, ms
--
-- While the voucher has no stock (unloaded, or being rebuilt), the slot
-- alone changes: the rebuild sets the stock from the buyers it finds.
--
-- ver, changes and held keep the instances' copies of a sold-out voucher's
-- buyers true (redis/soldout.go): each bump of ver is logged in changes
-- with the buyer whose slot it changed, so that a copy applies the changes
-- since its ver instead of copying every buyer again; a copy answers alone
-- only while a read sent less than 100 ms ago (less than the hold) found
-- it true and the voucher sold out, and a unit given back to a sold-out
-- voucher is admitted to no one for the hold, so no buyer can hold an order
-- that such a copy does not show.
--
-- Returns 1 if done, 0 if the buyer's slot does not hold that order
-- (already given back: nothing done).
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
-- The order to keep may have been cancelled since the caller read it (its
-- unit gone back with the cancellation, return_unit.lua marking it): it
-- holds no unit, so the slot is freed and the unit given back instead.
local keep = ARGV[3]
if keep ~= '' and (redis.call('HGET', KEYS[5], ARGV[1]) == keep or redis.call('SISMEMBER', KEYS[6], keep) == 1) then
  keep = ''
end
local stock = redis.call('GET', KEYS[1])
if stock then
  redis.call('HINCRBY', KEYS[3], 'ver', 1)
  redis.call('RPUSH', KEYS[4], redis.call('HGET', KEYS[3], 'ver') .. ':' .. ARGV[1])
  redis.call('LTRIM', KEYS[4], -tonumber(ARGV[5]), -1)
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
end
if keep ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], keep)
  return 1
end
redis.call('HDEL', KEYS[2], ARGV[1])
if stock then
  redis.call('INCR', KEYS[1])
  if tonumber(stock) == 0 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('HSET', KEYS[3], 'held', tostring(now + tonumber(ARGV[4])))
  end
end
return 1
