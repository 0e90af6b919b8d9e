#!lua
-- stage_queued: record the buyers of a page of the orders still in a
-- voucher's stream while it is rebuilt (see rebuild_begin): admitted, maybe
-- not yet in the database. Nothing adds to the stream while the voucher is
-- unloaded, and nothing trims it (trim_orders waits for a stock), so paging
-- through it sees every entry that was there when the rebuild began, but
-- those dead-lettered since (which give their unit back).
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: gen, epoch
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] orders  stream: the order messages
-- KEYS[5] cancelled hash: user id -> cancelled order id: an entry of a
--                 cancelled order (acknowledged, not yet trimmed) is not
--                 staged
-- KEYS[6] returned set: order ids of cancelled orders of a voucher whose
--                 buyers may buy again: their entries are not staged either
-- ARGV[1] the voucher's generation
-- ARGV[2] the rebuild's epoch (from rebuild_begin)
-- ARGV[3] the first entry id to read ('-' for the start)
-- ARGV[4] how many entries to read at most
--
-- Returns {1, id}: staged up to entry id, the last read ('' when the page
-- was the stream's last); {0, ''}: the voucher has a stock already (stop);
-- {-1, ''}: the rebuild was superseded (start over).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, ''}
end
if (redis.call('HGET', KEYS[2], 'gen') or '0') ~= ARGV[1] or (redis.call('HGET', KEYS[2], 'epoch') or '0') ~= ARGV[2] then
  return {-1, ''}
end
local count = tonumber(ARGV[4])
local entries = redis.call('XRANGE', KEYS[4], ARGV[3], '+', 'COUNT', count)
for _, e in ipairs(entries) do
  local f = e[2]
  local id, user
  for i = 1, #f, 2 do
    if f[i] == 'id' then id = f[i + 1] elseif f[i] == 'user' then user = f[i + 1] end
  end
  if id and user and redis.call('HGET', KEYS[5], user) ~= id and redis.call('SISMEMBER', KEYS[6], id) == 0 then
    redis.call('HSETNX', KEYS[3], user, id)
  end
end
if #entries < count then
  return {1, ''}
end
return {1, entries[#entries][1]}
