#!lua
-- finish_rebuild: the last part of rebuilding a voucher that Redis lost.
-- Makes sure the consumer group exists (at 0: entries still in the stream
-- are then delivered), adds the buyers of the orders still in its stream
-- (admitted, maybe not yet in the database), writes the window, and sets
-- the stock to what the buyers leave.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] window  hash: begin, end (unix milliseconds)
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] orders  stream: the order messages
-- ARGV[1] initial stock of the voucher
-- ARGV[2] begin of the sale window, unix milliseconds
-- ARGV[3] end of the sale window, unix milliseconds
-- ARGV[4] consumer group
--
-- The group is made first, whatever the stock: a stream whose group was
-- lost while the stock survived is read again from its start.
--
-- Returns {1, stock} when it set the stock, {0, ''} when a stock was there
-- already (nothing else changed).
local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[4], ARGV[4], '0', 'MKSTREAM')
if not ok and not string.find(tostring(err.err or err), 'BUSYGROUP') then
  return redis.error_reply(tostring(err.err or err))
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, ''}
end
local entries = redis.call('XRANGE', KEYS[4], '-', '+')
for _, e in ipairs(entries) do
  local f = e[2]
  local id, user
  for i = 1, #f, 2 do
    if f[i] == 'id' then id = f[i + 1] elseif f[i] == 'user' then user = f[i + 1] end
  end
  if id and user then
    redis.call('HSETNX', KEYS[3], user, id)
  end
end
local left = tonumber(ARGV[1]) - redis.call('HLEN', KEYS[3])
if left < 0 then
  left = 0
end
redis.call('HSET', KEYS[2], 'begin', ARGV[2], 'end', ARGV[3])
redis.call('SET', KEYS[1], left)
return {1, tostring(left)}
