#!lua
-- stage_buyers: record a page of a voucher's buyers from the database while
-- it is rebuilt (see rebuild_begin). Admission refuses the voucher until
-- finish_rebuild sets its stock, so staging in pages is safe. The caller
-- bounds the page: one call must not hold Redis for long.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: gen, epoch
-- KEYS[3] buyers  hash: user id -> order id
-- ARGV[1] the voucher's generation
-- ARGV[2] the rebuild's epoch (from rebuild_begin)
-- ARGV[3..] pairs of user id, order id (the database's orders win over
--         buyers staged from the stream)
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
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
return 1
