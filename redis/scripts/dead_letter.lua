#!lua
-- dead_letter: move an order message that cannot be persisted to the
-- dead-letter stream, give its stock and its buyer's slot back, and ack it,
-- atomically.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] buyers  hash: user id -> order id
-- KEYS[3] orders  stream: the order messages
-- KEYS[4] dlq     stream: the dead letters
-- KEYS[5] meta    hash: ver and held, kept as release.lua keeps them
-- KEYS[6] changes list: the log of ver, kept as release.lua keeps it
-- KEYS[7] cancelled hash: user id -> cancelled order id (no rebuy)
-- KEYS[8] returned  set: cancelled orders whose unit went back (rebuy)
-- ARGV[1] consumer group
-- ARGV[2] entry id of the message in KEYS[3]
-- ARGV[3] order id ('' if the message has none)
-- ARGV[4] user id ('' if the message has none)
-- ARGV[5] voucher id
-- ARGV[6] reason
-- ARGV[7] '1' to give the stock back, '0' not to (the database has none:
--         then only a stock below zero, Redis's oversell, is given back)
-- ARGV[8] order id to leave as the buyer's, or '' to free the slot
-- ARGV[9] how long a unit given back to a sold-out voucher is held, ms
-- ARGV[10] how many entries KEYS[6] keeps
-- ARGV[11] how long KEYS[6] is kept after its last entry, ms
--
-- The stock and slot go back only if the buyer's slot holds this very order:
-- that proves the message took them, and a second call finds it freed. The
-- entry is deleted from KEYS[3] (the dead letter keeps its content), so that
-- a rebuild of the voucher does not count its buyer again. While the voucher
-- has no stock (unloaded, or being rebuilt) only the slot changes: the
-- rebuild sets the stock from the buyers, and an INCR would make a stock
-- without a window, a voucher half there.
--
-- Returns -1 if the entry is no longer pending (another worker settled it:
-- nothing done), 1 if the stock was given back, else 0.
local pending = redis.call('XPENDING', KEYS[3], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then
  return -1
end
local owns = ARGV[3] ~= '' and ARGV[4] ~= '' and redis.call('HGET', KEYS[2], ARGV[4]) == ARGV[3]
local returned = 0
-- The order to leave as the buyer's may have been cancelled since the
-- caller read it: it holds no unit (see release.lua), so the stock is
-- given back and the slot freed instead.
local keep = ARGV[8]
local give = ARGV[7]
if keep ~= '' and (redis.call('HGET', KEYS[7], ARGV[4]) == keep or redis.call('SISMEMBER', KEYS[8], keep) == 1) then
  keep = ''
  give = '1'
end
if owns then
  if keep ~= '' then
    redis.call('HSET', KEYS[2], ARGV[4], keep)
  else
    redis.call('HDEL', KEYS[2], ARGV[4])
  end
  local stock = redis.call('GET', KEYS[1])
  if stock then
    redis.call('HINCRBY', KEYS[5], 'ver', 1)
    redis.call('RPUSH', KEYS[6], redis.call('HGET', KEYS[5], 'ver') .. ':' .. ARGV[4])
    redis.call('LTRIM', KEYS[6], -tonumber(ARGV[10]), -1)
    redis.call('PEXPIRE', KEYS[6], ARGV[11])
  end
  if stock and (give == '1' or tonumber(stock) < 0) then
    redis.call('INCR', KEYS[1])
    returned = 1
    if tonumber(stock) == 0 then
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      redis.call('HSET', KEYS[5], 'held', tostring(now + tonumber(ARGV[9])))
    end
  end
end
redis.call('XADD', KEYS[4], '*', 'entry', ARGV[2], 'id', ARGV[3], 'user', ARGV[4], 'voucher', ARGV[5],
  'reason', ARGV[6], 'stock_returned', tostring(returned))
redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[3], ARGV[2])
return returned
