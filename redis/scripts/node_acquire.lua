#!lua
-- node_acquire: lease a node id for making order ids, one that no running
-- instance holds.
--
-- KEYS[1] nodes  hash: node id -> "token expiry_ms last_ms", and the field
--                "epoch" -> when this hash was first written (Redis ms)
-- ARGV[1] token of the caller
-- ARGV[2] lease, milliseconds
-- ARGV[3] node id to try first (then the following ones, wrapping)
-- ARGV[4] number of node ids
--
-- A lease that expired is free. last_ms is the newest order-id time its
-- last holder reported: the new holder starts after it, so a clock that
-- stepped back cannot repeat an id.
--
-- Returns {node, last_ms, epoch_ms, now_ms}, or {-1} if every id is held.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSETNX', KEYS[1], 'epoch', tostring(now))
local epoch = redis.call('HGET', KEYS[1], 'epoch')
local n = tonumber(ARGV[4])
for i = 0, n - 1 do
  local node = (tonumber(ARGV[3]) + i) % n
  local v = redis.call('HGET', KEYS[1], tostring(node))
  local last = '0'
  local free = true
  if v then
    local _, expiry, l = string.match(v, '^(%S+) (%d+) (%d+)$')
    if expiry and tonumber(expiry) > now then
      free = false
    end
    last = l or '0'
  end
  if free then
    redis.call('HSET', KEYS[1], tostring(node), ARGV[1] .. ' ' .. tostring(now + tonumber(ARGV[2])) .. ' ' .. last)
    return {node, last, epoch, tostring(now)}
  end
end
return {-1}
