#!lua
-- reap_consumer: remove a consumer from a group, but only if it has no
-- pending entries, atomically: a consumer removed with entries pending
-- would take their only record of delivery with it.
--
-- KEYS[1] orders  stream
-- ARGV[1] consumer group
-- ARGV[2] consumer name
--
-- Returns 1 if removed, 0 if it has entries pending.
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
