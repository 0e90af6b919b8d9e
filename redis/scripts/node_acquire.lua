#!lua
-- node_acquire: lease a node id for making order ids, one that no running
-- instance holds.
--
-- KEYS[1] nodes  hash: node id -> "token expiry_ms last_ms"; the field
--                "server" -> the identity of the server the leases were
--                last written on (run_id/master_replid); the field "epoch"
--                -> when they were found new there (Redis ms): first
--                written, or written before on another server
-- ARGV[1] token of the caller
-- ARGV[2] lease, milliseconds
-- ARGV[3] node id to try first (then the following ones, wrapping)
-- ARGV[4] number of node ids
-- ARGV[5] the server's identity, or "" to read it from INFO here (the
--         embedded server, which lives and dies with its one holder,
--         names itself)
--
-- A lease that expired is free. last_ms is the newest order-id time its
-- last holder reported: the new holder starts after it, so a clock that
-- stepped back cannot repeat an id.
--
-- Leases found written on another server (a restart, perhaps from an older
-- snapshot; a failover, perhaps to a lagging replica) may be older than
-- what running holders hold: a node id shown free may be in use. The epoch
-- restarts then, as for leases written for the first time, and the caller
-- waits before making ids until every holder from before has stopped
-- (docs/design/orderids.md, Order ids). Renewals do not record the server: only the
-- first lease taken on a new server restarts the epoch.
--
-- Returns {node, last_ms, epoch_ms, now_ms}, or {-1} if every id is held.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local server = ARGV[5]
if server == '' then
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
  local repl = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
  if not run or not repl then
    return redis.error_reply('ERR node_acquire: INFO has no run_id or master_replid')
  end
  server = run .. '/' .. repl
end
if redis.call('HGET', KEYS[1], 'server') ~= server then
  redis.call('HSET', KEYS[1], 'server', server, 'epoch', tostring(now))
end
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
