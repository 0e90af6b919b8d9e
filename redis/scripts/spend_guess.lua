#!lua
-- spend_guess: count a login attempt against the allowances of wrong codes.
--
-- KEYS[1] global  string: attempts counted this window, all clients
-- KEYS[2] client  string: attempts counted this window, one client address
-- ARGV[1] attempts all clients together may count per window (0: no limit;
--         KEYS[1] is not touched)
-- ARGV[2] attempts one client may count per window (0: no limit; KEYS[2]
--         is not touched)
-- ARGV[3] the window, milliseconds
--
-- A count lives one window from its first attempt (a fixed window). The
-- attempt of a right code is given back (refund_guess.lua), so the counts
-- are of wrong codes and of attempts still being checked.
--
-- Past the global allowance, a client that has counted nothing this window
-- is still heard, its attempt counted: an honest buyer, whose first code
-- is right, logs in while an attacker spends the allowance, and the
-- attacker gets one attempt per fresh address (found by review: refusing
-- everyone let one client, 334 addresses of one IPv6 /55 at the defaults,
-- shut every login for an hour).
--
-- Returns {0, ''} when the attempt is counted in both; else nothing is
-- counted, and it returns the milliseconds until the allowance that refused
-- it renews and which it was, 'client' or 'global' (the client's is asked
-- first).
local global = tonumber(ARGV[1])
local client = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
if client > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= client then
  local ttl = redis.call('PTTL', KEYS[2])
  if ttl > 0 then
    return {ttl, 'client'}
  end
  redis.call('PEXPIRE', KEYS[2], window)
  return {window, 'client'}
end
local fresh = client > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') == 0
if global > 0 and not fresh and tonumber(redis.call('GET', KEYS[1]) or '0') >= global then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    return {ttl, 'global'}
  end
  redis.call('PEXPIRE', KEYS[1], window)
  return {window, 'global'}
end
if client > 0 then
  redis.call('INCR', KEYS[2])
  if redis.call('PTTL', KEYS[2]) < 0 then
    redis.call('PEXPIRE', KEYS[2], window)
  end
end
if global > 0 then
  redis.call('INCR', KEYS[1])
  if redis.call('PTTL', KEYS[1]) < 0 then
    redis.call('PEXPIRE', KEYS[1], window)
  end
end
return {0, ''}
