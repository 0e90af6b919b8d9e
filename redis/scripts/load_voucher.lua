#!lua
-- load_voucher: put a new voucher's stock and sale window into Redis, and
-- make its order stream's consumer group.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] window  hash: begin, end (unix milliseconds)
-- KEYS[3] orders  stream: the order messages
-- ARGV[1] stock to set when KEYS[1] is absent
-- ARGV[2] begin of the sale window, unix milliseconds
-- ARGV[3] end of the sale window, unix milliseconds
-- ARGV[4] consumer group
--
-- Returns 1 if it set the stock, 0 if a stock was already there. The stock
-- is never overwritten: admissions may have taken from it. The window is
-- always written and an existing group is left alone, so loading twice is
-- harmless.
local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[3], ARGV[4], '0', 'MKSTREAM')
if not ok and not string.find(tostring(err.err or err), 'BUSYGROUP') then
  return redis.error_reply(tostring(err.err or err))
end
redis.call('HSET', KEYS[2], 'begin', ARGV[2], 'end', ARGV[3])
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  return 1
end
return 0
