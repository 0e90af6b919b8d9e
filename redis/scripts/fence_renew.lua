#!lua
-- fence_renew: extend the caller's hold on the check of the Redis server
-- (see fence_set) while it unloads the open vouchers, or on the rebuilding
-- of the vouchers a check unloaded, or on a voucher's control lock
-- (Client.LockControl); or end it.
--
-- KEYS[1] lock   string: the token of the instance holding it
-- ARGV[1] the caller's token
-- ARGV[2] how long to hold it from now, milliseconds; '0' ends the hold
--         (PEXPIRE deletes the key)
--
-- Returns 1 if extended (or ended), 0 if the caller no longer holds it.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
