#!lua
-- node_release: give a node id back at shutdown, keeping the newest order-id
-- time used for its next holder.
--
-- KEYS[1] nodes  hash: node id -> "token expiry_ms last_ms" (see node_acquire;
--                its "server" and "epoch" are not touched here)
-- ARGV[1] node id
-- ARGV[2] token of the caller
-- ARGV[3] newest order-id time used, unix milliseconds
--
-- Returns 1 if released, 0 if the node id was not the caller's.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or string.match(v, '^(%S+) ') ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' 0 ' .. ARGV[3])
return 1
