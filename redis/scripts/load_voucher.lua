#!lua
-- load_voucher: put a voucher just created into Redis: its stock, its sale
-- window, its generation and its order stream's consumer group.
--
-- If Redis holds this very generation of the voucher already, a buyer or
-- another instance got there first and rebuilt it from the database, and
-- may have admitted buyers since: nothing changes. State of another
-- generation under the voucher's id is stale (a database reset, or two
-- databases sharing one key prefix) and is replaced: buyers, stream and dead
-- letters; so is the tombstone of a voucher dropped past its retention.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: begin, end (unix milliseconds), gen, epoch
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] orders  stream: the order messages
-- KEYS[5] dlq     stream: the dead letters
-- KEYS[6] cancelled hash: user id -> cancelled order id, replaced with
--                 the buyers
-- KEYS[7] returned set: order ids of cancelled orders of a voucher whose
--                 buyers may buy again, replaced with the buyers
-- KEYS[8] xout    hash: a shard's transfers out (transfer_take.lua)
-- KEYS[9] xin     hash: a shard's transfers in (transfer_give.lua)
-- ARGV[1] stock
-- ARGV[2] begin of the sale window, unix milliseconds
-- ARGV[3] end of the sale window, unix milliseconds
-- ARGV[4] consumer group
-- ARGV[5] the voucher's generation
-- ARGV[6] for a shard of a sharded voucher, how many shards it has; ''
--         for an unsharded voucher, which writes exactly what it always did
-- ARGV[7] for a shard of a sharded voucher, its index; else ''
--
-- A shard of a sharded voucher is loaded as a voucher of its own, with its
-- part of the stock, and its meta also says shards, index and xgen (the
-- transfer generation, "0" until a rebuild resets the transfers); its
-- transfers of a replaced generation go with the rest.
--
-- Returns 1 if it replaced state Redis held for the id, 0 if it loaded the
-- voucher into an empty place, -1 if this generation was there already.
-- The next epoch: the larger of the count's next and Redis's clock in
-- microseconds, so that it never repeats, also after Redis came back with
-- older data (whose counts a rebuild in flight may hold again).
local function next_epoch()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return string.format('%d', math.max(tonumber(redis.call('HGET', KEYS[2], 'epoch') or '0') + 1, now))
end
if redis.call('HGET', KEYS[2], 'gen') == ARGV[5] and redis.call('HEXISTS', KEYS[2], 'dropped') == 0 then
  return -1
end
local stale = redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
-- A new epoch: a rebuild in flight for the state replaced stops.
local epoch = next_epoch()
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
redis.call('XGROUP', 'CREATE', KEYS[4], ARGV[4], '0', 'MKSTREAM')
redis.call('HSET', KEYS[2], 'begin', ARGV[2], 'end', ARGV[3], 'gen', ARGV[5], 'epoch', epoch)
if ARGV[6] ~= '' then
  redis.call('UNLINK', KEYS[8], KEYS[9])
  redis.call('HSET', KEYS[2], 'shards', ARGV[6], 'index', ARGV[7], 'xgen', '0')
end
redis.call('SET', KEYS[1], ARGV[1])
if stale > 0 then
  return 1
end
return 0
