#!lua
-- refund_guess: give back a login attempt spend_guess.lua counted, for a
-- code that was right or could not be checked.
--
-- KEYS[1] global  string: attempts counted this window, all clients
-- KEYS[2] client  string: attempts counted this window, one client address
-- ARGV    none
--
-- A count that is gone (its window ended) or zero is left alone: an
-- attempt counted in one window and given back in the next frees one more
-- in the new window, at most one per right code.
--
-- Returns 0.
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then
  redis.call('DECR', KEYS[1])
end
if tonumber(redis.call('GET', KEYS[2]) or '0') > 0 then
  redis.call('DECR', KEYS[2])
end
return 0
