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
-- ARGV[1] user id
-- ARGV[2] order id
-- ARGV[3] order id to leave as the buyer's (keeping the stock), or '' to
--         free the slot and give the stock back
-- ARGV[4] how long a unit given back to a sold-out voucher is held, ms
--
-- While the voucher has no stock (unloaded, or being rebuilt), the slot
-- alone changes: the rebuild sets the stock from the buyers it finds.
--
-- ver and held keep the instances' copies of a sold-out voucher's buyers
-- true (redis/soldout.go): a copy is used only while a read of ver sent
-- less than the hold ago found it unchanged, and a unit given back to a
-- sold-out voucher is admitted to no one for the hold, so no buyer can hold
-- an order that such a copy does not show.
--
-- Returns 1 if done, 0 if the buyer's slot does not hold that order
-- (already given back: nothing done).
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
local stock = redis.call('GET', KEYS[1])
if stock then
  redis.call('HINCRBY', KEYS[3], 'ver', 1)
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
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
