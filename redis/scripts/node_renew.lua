#!lua
-- node_renew: extend the caller's lease of a node id and record the newest
-- order-id time it used.
--
-- KEYS[1] nodes  hash: node id -> "token expiry_ms last_ms" (see node_acquire;
--                its "server" and "epoch" are not touched here)
-- ARGV[1] node id
-- ARGV[2] token of the caller
-- ARGV[3] lease, milliseconds
-- ARGV[4] newest order-id time used, unix milliseconds
-- ARGV[5] '1' if the caller's last renewal confirmed was sent less than its
--         validity ago (it still makes ids), else '0'
--
-- Returns 1 if renewed, 0 if the node id is not the caller's (the lease was
-- lost: taken by another, or Redis lost it) or its lease ran out: the
-- caller must stop using it, and take a node id anew.
--
-- A lease that ran out is not renewed, though it still names the caller,
-- unless the caller renewed it within its validity (ARGV[5]): another may
-- have taken the node id meanwhile, and Redis come back with data from
-- before it did (a restart from an older snapshot, a failover to a replica
-- that lagged). Renewed, the caller would make ids with the node id the
-- other still uses; taking one anew, it waits out the leases' epoch, which
-- a server change restarts (node_acquire), by which time the other has
-- stopped (found by review). A caller that renewed within its validity held
-- the lease on the server before, which then lasted longer still (the
-- validity is shorter than the lease): no one took it there, and a holder
-- renewing all along goes on through a restart from an older snapshot.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  return 0
end
local token, expiry = string.match(v, '^(%S+) (%d+)')
if token ~= ARGV[2] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(expiry) <= now and ARGV[5] ~= '1' then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. tostring(now + tonumber(ARGV[3])) .. ' ' .. ARGV[4])
return 1
