#!lua
-- unload: delete a voucher's stock, and its buyers unless asked to keep
-- them, so that it is rebuilt from the database; and start a new epoch, so
-- that a rebuild in flight (which staged buyers maybe now deleted) starts
-- over instead of setting a stock from what is left. Admission refuses the
-- voucher until the rebuild.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: epoch
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] cancelled hash: user id -> cancelled order id, kept or deleted
--                 with the buyers (the rebuild stages it again from the
--                 database)
-- KEYS[5] returned set: order ids of cancelled orders of a voucher whose
--                 buyers may buy again, kept or deleted as KEYS[4]
-- ARGV[1] '1' to keep the buyers (the rebuild counts them with those it
--         finds), '0' to delete them
--
-- A voucher dropped past its retention (its meta a tombstone, see
-- drop_voucher) is left as it is: nothing to unload, nothing to make again.
--
-- Returns the new epoch (the tombstone's, unchanged, for a dropped one).
-- The next epoch: the larger of the count's next and Redis's clock in
-- microseconds, so that it never repeats, also after Redis came back with
-- older data (whose counts a rebuild in flight may hold again).
local function next_epoch()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return string.format('%d', math.max(tonumber(redis.call('HGET', KEYS[2], 'epoch') or '0') + 1, now))
end
if redis.call('HEXISTS', KEYS[2], 'dropped') == 1 then
  return tonumber(redis.call('HGET', KEYS[2], 'epoch') or '0')
end
if ARGV[1] == '1' then
  redis.call('UNLINK', KEYS[1])
else
  redis.call('UNLINK', KEYS[1], KEYS[3], KEYS[4], KEYS[5])
end
local epoch = next_epoch()
redis.call('HSET', KEYS[2], 'epoch', epoch)
return tonumber(epoch)
