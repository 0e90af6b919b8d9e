#!lua
-- redeem_code: consume a phone's login code if the one given matches.
--
-- KEYS[1] code   string: the current code
-- KEYS[2] tries  string: wrong tries against the current code
-- ARGV[1] the code given
-- ARGV[2] wrong tries allowed before the code is voided
--
-- Returns 0 when the code matched (it is deleted: a code logs in once),
-- -1 when there is no code (never issued, expired, used or voided),
-- -2 when this wrong try used up the allowance (the code is voided),
-- n > 0 when the code is wrong and n tries are left.
local stored = redis.call('GET', KEYS[1])
if not stored then
  return -1
end
if stored == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 0
end
local tries = redis.call('INCR', KEYS[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local left = tonumber(ARGV[2]) - tries
if left <= 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
  return -2
end
return left
