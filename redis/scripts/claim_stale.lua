#!lua
-- claim_stale: hand a consumer the order messages pending longer than a
-- minimum idle time, looking at a bounded part of the pending list from a
-- cursor, as XAUTOCLAIM does; but a message taken from a consumer that is
-- still alive keeps its delivery count. Its owner did not die on it (it
-- was late renewing its claim), and the message must not near the
-- dead-letter limit for that.
--
-- KEYS[1] orders  stream: the order messages
-- ARGV[1] consumer group
-- ARGV[2] consumer to hand the messages to
-- ARGV[3] minimum idle time, milliseconds
-- ARGV[4] cursor: the least entry id to look at ('0-0' from the start)
-- ARGV[5] how many messages to claim at most
-- ARGV[6] how many pending entries to look at at most
-- ARGV[7..] the consumers that are alive
--
-- A pending entry deleted from the stream (only a loss of Redis data does
-- that) leaves the pending list, as XAUTOCLAIM drops it, and is reported.
--
-- Returns {cursor, entries, counts, deleted}: the cursor to go on from
-- ('0-0' once the end of the list was looked at), the claimed entries as
-- XRANGE returns them, their delivery counts in the same order, and the
-- ids of the deleted entries.
local live = {}
for i = 7, #ARGV do
  live[ARGV[i]] = true
end
local minIdle, want, scan = tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[6])
local rows = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[4], '+', scan)
local entries, counts, deleted = {}, {}, {}
for _, row in ipairs(rows) do
  local id, owner, idle, n = row[1], row[2], row[3], row[4]
  if #entries == want then
    return {id, entries, counts, deleted}
  end
  if idle >= minIdle then
    local found = redis.call('XRANGE', KEYS[1], id, id)
    if #found == 0 then
      redis.call('XACK', KEYS[1], ARGV[1], id)
      deleted[#deleted + 1] = id
    else
      if not live[owner] then
        n = n + 1
      end
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'RETRYCOUNT', n, 'JUSTID')
      entries[#entries + 1] = found[1]
      counts[#counts + 1] = n
    end
  end
end
if #rows < scan then
  return {'0-0', entries, counts, deleted}
end
local ms, seq = string.match(rows[#rows][1], '^(%d+)-(%d+)$')
return {ms .. '-' .. string.format('%d', tonumber(seq) + 1), entries, counts, deleted}
