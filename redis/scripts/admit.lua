#!lua
-- admit: admit one buyer to a flash sale, atomically. Reads first, writes
-- last: a script that fails half-way does not roll back. The buyer is looked
-- up before the window, so that a buyer asking again gets their order back
-- even after the sale ended (G5).
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: begin, end (unix milliseconds), gen (generation),
--                 held (unix ms: units given back are not sold before it),
--                 paused ('1' while an operator paused the sale) and cut
--                 (set once an operator ended the sale: ended whatever the
--                 clock says); see control.lua
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] orders  stream: the admitted orders, for the workers
-- KEYS[5] cancelled hash: user id -> cancelled order id (return_unit.lua):
--                 a buyer whose order was cancelled buys no more
-- ARGV[1] user id
-- ARGV[2] order id (made by the service, decimal)
-- ARGV[3] voucher id
-- ARGV[4] '1' to append the order to KEYS[4] (stream mode), '0' not to
--         (queue mode: the service queues it in memory)
-- ARGV[5] the voucher's generation in the database
-- ARGV[6] '1' when the caller waits for replicas (WAIT) before answering: a
--         duplicate then writes the buyer's slot again, unchanged, so that
--         the caller's WAIT covers the admission that made the order (or
--         the return of its unit, for a cancelled one)
--
-- Returns {code, order id}:
--   {0, ARGV[2]}  admitted: stock taken, buyer recorded, order appended
--                 (if ARGV[4] is '1')
--   {1, id}       duplicate: the buyer already has order id, or had it
--                 and it was cancelled (KEYS[5])
--   {2, ''}       sold out
--   {3, ''}       the sale has not started
--   {4, ''}       the sale has ended
--   {5, ''}       the voucher is not loaded: no stock or window in Redis,
--                 or the state of another generation of its id
--   {6, ms}       stock is there but held for ms more: it was given back,
--                 or rebuilt, a moment ago (see release.lua); ask again then
--   {7, ''}       an operator paused the sale
local stock = redis.call('GET', KEYS[1])
local meta = redis.call('HMGET', KEYS[2], 'begin', 'end', 'gen', 'held', 'paused', 'cut')
if not stock or not meta[1] or not meta[2] or (meta[3] or '0') ~= ARGV[5] then
  return {5, ''}
end
local existing = redis.call('HGET', KEYS[3], ARGV[1])
if existing then
  if ARGV[6] == '1' then
    redis.call('HSET', KEYS[3], ARGV[1], existing)
  end
  return {1, existing}
end
local cancelled = redis.call('HGET', KEYS[5], ARGV[1])
if cancelled then
  if ARGV[6] == '1' then
    redis.call('HSET', KEYS[5], ARGV[1], cancelled)
  end
  return {1, cancelled}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The end before the start: a sale an operator ended before it began is
-- ended, not "not started" until the start it had.
if meta[6] or now >= tonumber(meta[2]) then
  return {4, ''}
end
if now < tonumber(meta[1]) then
  return {3, ''}
end
if meta[5] == '1' then
  return {7, ''}
end
if tonumber(stock) <= 0 then
  return {2, ''}
end
if meta[4] and now < tonumber(meta[4]) then
  return {6, tostring(tonumber(meta[4]) - now)}
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
if ARGV[4] == '1' then
  redis.call('XADD', KEYS[4], '*', 'id', ARGV[2], 'user', ARGV[1], 'voucher', ARGV[3], 'at', tostring(now))
end
return {0, ARGV[2]}
