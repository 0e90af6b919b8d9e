#!lua
-- give_up: abandon a consumer's order messages (their save failed for an
-- unknown reason, or panicked): hand them to a consumer that never reads,
-- so that the reclaimer takes them over when the lease runs out as from a
-- consumer that died, and counts a delivery. A message taken from a live
-- consumer does not count one (claim_stale.lua): without this a message
-- that fails every time, its consumer alive, would never reach the
-- dead-letter limit.
--
-- KEYS[1] orders  stream: the order messages
-- ARGV[1] consumer group
-- ARGV[2] consumer giving up
-- ARGV[3] consumer that never reads, to hand the messages to
-- ARGV[4..] entry ids
--
-- Returns how many of the entries were pending with ARGV[2]: only those
-- are handed over, each with its delivery count as it was.
local n = 0
for i = 4, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #p == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[i], 'RETRYCOUNT', p[1][4], 'JUSTID')
    n = n + 1
  end
end
return n
