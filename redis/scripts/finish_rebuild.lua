#!lua
-- finish_rebuild: the last step of rebuilding a voucher (see
-- rebuild_begin): make sure the consumer group exists (at 0: entries still
-- in the stream are then delivered), write the window, and set the stock to
-- what the staged buyers leave.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: begin, end (unix milliseconds), gen, epoch, and
--                 the operator's controls paused and cut (control.lua)
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] orders  stream: the order messages
-- ARGV[1] the voucher's generation
-- ARGV[2] the rebuild's epoch (from rebuild_begin)
-- ARGV[3] initial stock of the voucher
-- ARGV[4] begin of the sale window, unix milliseconds
-- ARGV[5] end of the sale window, unix milliseconds
-- ARGV[6] consumer group
-- ARGV[7] '1' if the database's row says the sale is paused, else '0'
--
-- The operator's controls in meta outlive an unload, and are newer than
-- the row the rebuild read (a control written after that read): they are
-- kept. Only a voucher that lost its meta takes paused from the row; one
-- ended by an operator (cut) keeps the earlier of the two ends.
--
-- Returns {1, stock} when it set the stock; {0, ''} when a stock was there
-- already (someone else finished: nothing changed); {-1, ''} when the
-- rebuild was superseded (start over).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, ''}
end
if (redis.call('HGET', KEYS[2], 'gen') or '0') ~= ARGV[1] or (redis.call('HGET', KEYS[2], 'epoch') or '0') ~= ARGV[2] then
  return {-1, ''}
end
local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[4], ARGV[6], '0', 'MKSTREAM')
if not ok and not string.find(tostring(err.err or err), 'BUSYGROUP') then
  return redis.error_reply(tostring(err.err or err))
end
local left = tonumber(ARGV[3]) - redis.call('HLEN', KEYS[3])
if left < 0 then
  left = 0
end
-- ver anew (the server's time, which no earlier ver reached): the copies of
-- the buyers made before are stale (release.lua).
local t = redis.call('TIME')
local finish = ARGV[5]
local cut = redis.call('HGET', KEYS[2], 'cut')
if cut and tonumber(cut) < tonumber(finish) then
  finish = cut
end
redis.call('HSET', KEYS[2], 'begin', ARGV[4], 'end', finish, 'ver', t[1] .. string.format('%06d', tonumber(t[2])))
redis.call('HSETNX', KEYS[2], 'paused', ARGV[7])
redis.call('SET', KEYS[1], left)
return {1, tostring(left)}
