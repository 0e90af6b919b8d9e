#!lua
-- fence_renew: extend the caller's hold on the check of the Redis server
-- (see fence_set) while it rebuilds the open vouchers.
--
-- KEYS[1] lock   string: the token of the instance checking
-- ARGV[1] the caller's token
-- ARGV[2] how long to hold it from now, milliseconds
--
-- Returns 1 if extended, 0 if the caller no longer holds it.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
