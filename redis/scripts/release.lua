#!lua
-- release: give back an admission that will not be kept (the queue mode's
-- queue was full): the buyer's slot and the stock it took.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] buyers  hash: user id -> order id
-- ARGV[1] user id
-- ARGV[2] order id
--
-- Returns 1 if given back, 0 if the buyer's slot does not hold that order
-- (already given back: nothing done).
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('INCR', KEYS[1])
return 1
