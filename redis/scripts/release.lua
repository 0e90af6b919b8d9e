#!lua
-- release: give back an admission that will not be kept: the buyer's slot
-- and the stock it took (the queue mode's queue was full, or its order
-- failed); or, for a buyer Redis admitted twice, hand the slot to the order
-- the database holds and keep the stock, which counts that order.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] buyers  hash: user id -> order id
-- ARGV[1] user id
-- ARGV[2] order id
-- ARGV[3] order id to leave as the buyer's (keeping the stock), or '' to
--         free the slot and give the stock back
--
-- While the voucher has no stock (unloaded, or being rebuilt), the slot
-- alone changes: the rebuild sets the stock from the buyers it finds.
--
-- Returns 1 if done, 0 if the buyer's slot does not hold that order
-- (already given back: nothing done).
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  return 1
end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('INCR', KEYS[1])
end
return 1
