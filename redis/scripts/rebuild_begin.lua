#!lua
-- rebuild_begin: the first step of rebuilding a voucher from the database
-- (Redis lost it, an operator repairs it, or Redis holds another generation
-- of its id). The rebuild then stages its buyers (stage_buyers,
-- stage_queued) and sets its stock (finish_rebuild), each step checking the
-- epoch this one returns: an unload in between bumps it, and the rebuild
-- starts over instead of setting a stock from buyers that were deleted.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: begin, end (unix milliseconds), gen, epoch
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] orders  stream: the order messages
-- KEYS[5] dlq     stream: the dead letters
-- KEYS[6] cancelled hash: user id -> cancelled order id, deleted with the
--                 buyers
-- KEYS[7] returned set: order ids of cancelled orders of a voucher whose
--                 buyers may buy again, deleted with the buyers
-- ARGV[1] the voucher's generation in the database
-- ARGV[2] consumer group
-- ARGV[3] how long the stock is held (meta 'held', see release.lua) after
--         a rebuild began, ms: copies of the buyers made before it must
--         age out before anyone is admitted again
--
-- State of another generation is deleted first: its buyers and orders are
-- those of another voucher that had the id. A stock without its window
-- (a voucher half there) is deleted with the buyers and rebuilt.
--
-- A voucher of this generation dropped past its retention (its meta a
-- tombstone, see drop_voucher) is not rebuilt: {-1, '', 0}.
--
-- Returns {0, epoch, 0} when the voucher is loaded already (its group is
-- made at 0 if it was lost, so that its stream is read again from the
-- start), else {1, epoch, replaced}: rebuild at epoch; replaced is 1 when
-- state of another generation was deleted.
local function hold()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[2], 'held', tostring(now + tonumber(ARGV[3])))
end
local function ensure_group()
  local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[4], ARGV[2], '0', 'MKSTREAM')
  if not ok and not string.find(tostring(err.err or err), 'BUSYGROUP') then
    error(err)
  end
end
-- The next epoch: the larger of the count's next and Redis's clock in
-- microseconds, so that it never repeats, also after Redis came back with
-- older data (whose counts a rebuild in flight may hold again).
local function next_epoch()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return string.format('%d', math.max(tonumber(redis.call('HGET', KEYS[2], 'epoch') or '0') + 1, now))
end
local gen = redis.call('HGET', KEYS[2], 'gen') or '0'
if gen == ARGV[1] and redis.call('HEXISTS', KEYS[2], 'dropped') == 1 then
  return {-1, '', 0}
end
if gen ~= ARGV[1] then
  local stale = redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
  local epoch = next_epoch()
  redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
  redis.call('HSET', KEYS[2], 'gen', ARGV[1], 'epoch', epoch)
  hold()
  local replaced = 0
  if stale > 0 then
    replaced = 1
  end
  return {1, epoch, replaced}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HEXISTS', KEYS[2], 'begin') == 1 and redis.call('HEXISTS', KEYS[2], 'end') == 1 then
    ensure_group()
    return {0, redis.call('HGET', KEYS[2], 'epoch') or '0', 0}
  end
  redis.call('UNLINK', KEYS[1], KEYS[3], KEYS[6], KEYS[7])
  redis.call('HSET', KEYS[2], 'epoch', next_epoch())
end
hold()
return {1, redis.call('HGET', KEYS[2], 'epoch') or '0', 0}
