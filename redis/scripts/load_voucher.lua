#!lua
-- load_voucher: put a voucher's stock and sale window into Redis.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] window  hash: begin, end (unix milliseconds)
-- ARGV[1] stock to set when KEYS[1] is absent
-- ARGV[2] begin of the sale window, unix milliseconds
-- ARGV[3] end of the sale window, unix milliseconds
--
-- Returns 1 if it set the stock, 0 if a stock was already there. The stock
-- is never overwritten: admissions may have taken from it. The window is
-- always written, so loading twice is harmless.
redis.call('HSET', KEYS[2], 'begin', ARGV[2], 'end', ARGV[3])
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  return 1
end
return 0
