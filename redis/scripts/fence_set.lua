#!lua
-- fence_set: record the identity of the Redis server that the data was
-- checked against (every open voucher rebuilt from the database on it), and
-- end the check, if the caller still holds it.
--
-- KEYS[1] fence  hash: identity -> the server identity
-- KEYS[2] lock   string: the token of the instance checking
-- ARGV[1] the caller's token
-- ARGV[2] the server identity
--
-- Returns 1 if recorded, 0 if the caller no longer held the check (its lock
-- expired, and another instance may be checking: nothing done).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'identity', ARGV[2])
redis.call('DEL', KEYS[2])
return 1
