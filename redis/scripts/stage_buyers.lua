#!lua
-- stage_buyers: record a page of a voucher's buyers from the database while
-- it is rebuilt (see rebuild_begin). Admission refuses the voucher until
-- finish_rebuild sets its stock, so staging in pages is safe. The caller
-- bounds the page: one call must not hold Redis for long.
--
-- KEYS[1] stock     string: units left to admit
-- KEYS[2] meta      hash: gen, epoch
-- KEYS[3] buyers    hash: user id -> order id
-- KEYS[4] cancelled hash: user id -> cancelled order id (return_unit.lua)
-- KEYS[5] returned  set: order ids of cancelled orders of a voucher whose
--                   buyers may buy again (return_unit.lua)
-- ARGV[1] the voucher's generation
-- ARGV[2] the rebuild's epoch (from rebuild_begin)
-- ARGV[3] '1' if the voucher lets a buyer buy again after a cancellation
--         (its cancelled orders go to KEYS[5]), '0' if not (to KEYS[4])
-- ARGV[4] n, how many of the pairs that follow are of orders that hold a
--         unit (created, paid)
-- ARGV[5..] n pairs of user id, order id of orders that hold a unit (the
--         database's orders win over buyers staged from the stream), then
--         pairs of user id, order id of cancelled orders
--
-- An order holding a unit is staged as its buyer's, unless KEYS[4] has it
-- cancelled or KEYS[5] has it returned: its unit was given back
-- (return_unit.lua) after this page was read. A cancelled order is staged
-- into KEYS[4] (its buyer keeps the slot, and admission answers them with
-- it) or, if ARGV[3], into KEYS[5] (its buyer may buy again), never as a
-- buyer: it holds no unit, and the stock the rebuild sets counts its unit
-- as left; a slot that still holds it (buyers kept by an unload, the unit
-- not given back before a crash) is freed, so that its unit goes back
-- once, here.
--
-- Returns 1 if staged, 0 if the voucher has a stock already (someone else
-- finished the rebuild: stop), -1 if the rebuild was superseded (unloaded
-- or replaced since it began: start over).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if (redis.call('HGET', KEYS[2], 'gen') or '0') ~= ARGV[1] or (redis.call('HGET', KEYS[2], 'epoch') or '0') ~= ARGV[2] then
  return -1
end
local held = 5 + 2 * tonumber(ARGV[4])
for i = 5, held - 1, 2 do
  if redis.call('HGET', KEYS[4], ARGV[i]) ~= ARGV[i + 1] and redis.call('SISMEMBER', KEYS[5], ARGV[i + 1]) == 0 then
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  end
end
for i = held, #ARGV, 2 do
  if redis.call('HGET', KEYS[3], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[3], ARGV[i])
  end
  if ARGV[3] == '1' then
    redis.call('SADD', KEYS[5], ARGV[i + 1])
  else
    redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
  end
end
return 1
