#!lua
-- stage_buyers: the first part of rebuilding a voucher that Redis lost:
-- record a page of its buyers from the database. Admission refuses the
-- voucher until finish_rebuild sets its stock, so staging in pages is safe.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] buyers  hash: user id -> order id
-- ARGV    pairs of user id, order id
--
-- Returns 1 if staged, 0 if the voucher has a stock already (loaded or
-- rebuilt by someone else): stop staging then.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if #ARGV > 0 then
  redis.call('HSET', KEYS[2], unpack(ARGV))
end
return 1
