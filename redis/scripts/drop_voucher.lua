#!lua
-- drop_voucher: delete every key of a voucher whose sale ended longer ago
-- than the retention, once its order stream is drained: nothing pending
-- with a consumer, nothing left to deliver. Its dead letters are recorded
-- in the database as failed orders already; a late buy is answered ended
-- without Redis.
--
-- Its meta is left as a tombstone for ARGV[2] ms: dropped, its generation,
-- and its epoch bumped. A rebuild in flight then stops at its next step
-- (the epoch), and does not start over (rebuild_begin refuses a dropped
-- generation); an unload or a late count of persisted orders writes
-- nothing. Without it they made the keys again, and for good: the voucher
-- is retired once.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: begin, end, gen, epoch
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] orders  stream: the order messages
-- KEYS[5] dlq     stream: the dead letters
-- KEYS[6] cancelled hash: user id -> cancelled order id
-- KEYS[7] returned set: order ids of cancelled orders of a voucher whose
--                 buyers may buy again
-- ARGV[1] consumer group
-- ARGV[2] how long the tombstone stays, ms
--
-- Returns 1 if the keys were deleted, 0 if the stream is not drained
-- (nothing done).
-- before orders two stream ids "ms-seq" ("ms" alone is "ms-0").
local function before(a, b)
  local ams, aseq = string.match(a, '^(%d+)-?(%d*)$')
  local bms, bseq = string.match(b, '^(%d+)-?(%d*)$')
  if tonumber(ams) ~= tonumber(bms) then
    return tonumber(ams) < tonumber(bms)
  end
  return (tonumber(aseq) or 0) < (tonumber(bseq) or 0)
end
local last = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
if #last > 0 then
  local delivered
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[4])) do
    local name, pending, lastid
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1]
      elseif g[i] == 'pending' then pending = g[i + 1]
      elseif g[i] == 'last-delivered-id' then lastid = g[i + 1] end
    end
    if name == ARGV[1] then
      if tonumber(pending) > 0 then
        return 0
      end
      delivered = lastid
    end
  end
  if not delivered or before(delivered, last[1][1]) then
    return 0
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
local epoch = next_epoch()
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
redis.call('HSET', KEYS[2], 'dropped', '1', 'gen', gen, 'epoch', epoch)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
