#!lua
-- trim_orders: delete the order messages below an entry id, unless the
-- voucher is unloaded: a rebuild in flight counts the buyers of the entries
-- in the stream, and an entry trimmed under it (persisted after the rebuild
-- read the database) would be counted nowhere.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] orders  stream: the order messages
-- ARGV[1] the lowest entry id to keep (XTRIM MINID)
--
-- Returns how many entries were deleted, or -1 if the voucher has no stock
-- (nothing done).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
return redis.call('XTRIM', KEYS[2], 'MINID', ARGV[1])
