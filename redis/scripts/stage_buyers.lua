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
-- ARGV[1] the voucher's generation
-- ARGV[2] the rebuild's epoch (from rebuild_begin)
-- ARGV[3] n, how many of the pairs that follow are of orders that hold a
--         unit (created, paid)
-- ARGV[4..] n pairs of user id, order id of orders that hold a unit (the
--         database's orders win over buyers staged from the stream), then
--         pairs of user id, order id of cancelled orders that keep their
--         buyer's slot
--
-- An order holding a unit is staged as its buyer's, unless KEYS[4] has it
-- cancelled: its unit was given back (return_unit.lua) after this page was
-- read. A cancelled order is staged into KEYS[4], not as a buyer: it holds
-- no unit, and the stock the rebuild sets counts its unit as left; a slot
-- that still holds it (buyers kept by an unload, the unit not given back
-- before a crash) is freed, so that its unit goes back once, here.
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
local held = 4 + 2 * tonumber(ARGV[3])
for i = 4, held - 1, 2 do
  if redis.call('HGET', KEYS[4], ARGV[i]) ~= ARGV[i + 1] then
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  end
end
for i = held, #ARGV, 2 do
  if redis.call('HGET', KEYS[3], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[3], ARGV[i])
  end
  redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
end
return 1
