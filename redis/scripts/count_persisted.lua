#!lua
-- count_persisted: make Redis count orders the database holds that Redis
-- may not: orders persisted after Redis lost its data and the voucher was
-- rebuilt without them. Each buyer absent from Redis is recorded with its
-- order, and its unit taken from the stock, if there is one; a voucher not
-- rebuilt yet only gets the buyer, which the rebuild counts.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] buyers  hash: user id -> order id
-- KEYS[3] meta    hash: ver, bumped when a buyer is recorded (release.lua)
-- KEYS[4] changes list: the log of ver, kept as release.lua keeps it; more
--                 than 16 buyers recorded at once are logged as '*' (the
--                 copies are then made again)
-- KEYS[5] cancelled hash: user id -> cancelled order id: an order
--                 cancelled since it was persisted, its unit given back
--                 (return_unit.lua), is not recorded
-- KEYS[6] returned set: order ids of cancelled orders of a voucher whose
--                 buyers may buy again (return_unit.lua): not recorded
--                 either
-- ARGV[1] how many entries KEYS[4] keeps
-- ARGV[2] how long KEYS[4] is kept after its last entry, ms
-- ARGV[3..] pairs of user id, order id
--
-- The stock may go below zero: Redis then admitted more than the database
-- can hold, and dead letters of those orders give it back.
--
-- A voucher dropped past its retention (its meta a tombstone, see
-- drop_voucher) gets nothing: the keys would stay for good.
--
-- Returns how many buyers were recorded.
if redis.call('HEXISTS', KEYS[3], 'dropped') == 1 then
  return 0
end
local has_stock = redis.call('EXISTS', KEYS[1]) == 1
local recorded = {}
for i = 3, #ARGV, 2 do
  if redis.call('HGET', KEYS[5], ARGV[i]) ~= ARGV[i + 1] and redis.call('SISMEMBER', KEYS[6], ARGV[i + 1]) == 0
      and redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
    recorded[#recorded + 1] = ARGV[i]
    if has_stock then
      redis.call('DECR', KEYS[1])
    end
  end
end
if #recorded > 0 and has_stock then
  redis.call('HINCRBY', KEYS[3], 'ver', 1)
  local users = '*'
  if #recorded <= 16 then
    users = table.concat(recorded, ',')
  end
  redis.call('RPUSH', KEYS[4], redis.call('HGET', KEYS[3], 'ver') .. ':' .. users)
  redis.call('LTRIM', KEYS[4], -tonumber(ARGV[1]), -1)
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
return #recorded
