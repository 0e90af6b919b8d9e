#!lua
-- control: write an operator's control of a voucher's sale (or of one
-- shard of a sharded voucher) into its meta, where admit.lua reads it with
-- the window: paused, and cut (the sale ended by the operator). Meta
-- outlives an unload, and finish_rebuild keeps what this wrote over the
-- row a rebuild read, so a control answered is never undone by a rebuild
-- that read the row before it.
--
-- KEYS[1] meta    hash: gen, begin, end, epoch, paused, cut
-- ARGV[1] the voucher's generation
-- ARGV[2] '1' to pause the sale, '0' to let it admit
-- ARGV[3] the operator's end of the sale (unix milliseconds) to mark it
--         ended now, or '' to leave its end as it is
--
-- Meta of this generation takes the control. A voucher Redis holds nothing
-- of (lost, or never loaded) gets a meta of this generation holding only
-- the control (no window: admission answers "not loaded", and the rebuild
-- keeps the control). Meta of another generation (state of another voucher
-- that had the id) and a voucher dropped past its retention are left as
-- they are.
--
-- Returns 1 if it wrote the control, 0 if it left meta as it was.
local gen = redis.call('HGET', KEYS[1], 'gen')
if redis.call('HEXISTS', KEYS[1], 'dropped') == 1 then
  return 0
end
if gen and gen ~= ARGV[1] then
  return 0
end
if not gen then
  redis.call('HSET', KEYS[1], 'gen', ARGV[1])
end
redis.call('HSET', KEYS[1], 'paused', ARGV[2])
if ARGV[3] ~= '' then
  local cut = redis.call('HGET', KEYS[1], 'cut')
  if not cut or tonumber(ARGV[3]) < tonumber(cut) then
    cut = ARGV[3]
  end
  redis.call('HSET', KEYS[1], 'cut', cut)
  local finish = redis.call('HGET', KEYS[1], 'end')
  if not finish or tonumber(cut) < tonumber(finish) then
    redis.call('HSET', KEYS[1], 'end', cut)
  end
end
return 1
