#!lua
-- load_voucher: put a voucher just created into Redis: its stock, its sale
-- window and its order stream's consumer group. Whatever Redis held under
-- the voucher's id is stale (a database reset, or two databases sharing one
-- key prefix) and is replaced: buyers, stream and dead letters.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] window  hash: begin, end (unix milliseconds)
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] orders  stream: the order messages
-- KEYS[5] dlq     stream: the dead letters
-- ARGV[1] stock
-- ARGV[2] begin of the sale window, unix milliseconds
-- ARGV[3] end of the sale window, unix milliseconds
-- ARGV[4] consumer group
--
-- Returns 1 if it replaced state Redis held for the id, else 0.
local stale = redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4], KEYS[5])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('XGROUP', 'CREATE', KEYS[4], ARGV[4], '0', 'MKSTREAM')
redis.call('HSET', KEYS[2], 'begin', ARGV[2], 'end', ARGV[3])
redis.call('SET', KEYS[1], ARGV[1])
if stale > 0 then
  return 1
end
return 0
