#!lua
-- shard_thaw: end one hold of a shard frozen by shard_freeze. The shard
-- stays frozen while another hold lasts (xfrozen becomes the latest of
-- those left); with none left, transfers run on it again.
--
-- KEYS[1] meta    hash: xfrozen, xhold:*
-- ARGV[1] the holder's name, as given to shard_freeze
--
-- Returns 1 if the shard is thawed, 0 if another hold keeps it frozen.
redis.call('HDEL', KEYS[1], 'xhold:' .. ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local latest = 0
local f = redis.call('HGETALL', KEYS[1])
for i = 1, #f, 2 do
  if string.sub(f[i], 1, 6) == 'xhold:' then
    local u = tonumber(f[i + 1]) or 0
    if u <= now then
      redis.call('HDEL', KEYS[1], f[i])
    elseif u > latest then
      latest = u
    end
  end
end
if latest == 0 then
  redis.call('HDEL', KEYS[1], 'xfrozen')
  return 1
end
redis.call('HSET', KEYS[1], 'xfrozen', tostring(latest))
return 0
