#!lua flags=no-writes
-- copy_changes: read, at one instant, what an instance's copy of a sold-out
-- voucher's buyers needs to be made true again (redis/soldout.go): the
-- voucher's state, and the buyers whose slots changed since the copy was.
-- It only reads. Of a sharded voucher, each shard is read so, for its
-- own copy of the buyers whose home it is.
--
-- A buyer's slot is what admission answers them with: their order in
-- KEYS[3], else the cancelled order in KEYS[6] that keeps them from buying
-- again. A slot changes by an admission, which appends the order, with its
-- buyer, to the order stream, or by a script that bumps ver (release.lua,
-- dead_letter.lua, count_persisted.lua, return_unit.lua), which logs the
-- buyers it changed in KEYS[5] under the new ver. Anything else (a
-- rebuild, an unload, a new generation) changes gen or epoch, or deletes
-- the stock. The caller checks that its copy, with the slots returned
-- here, holds as many slots as KEYS[3] and KEYS[6] together: an admission
-- whose entry is gone from the stream (trimmed before this read) is
-- missing from it then.
--
-- KEYS[1] stock   string: units left to admit
-- KEYS[2] meta    hash: gen, epoch, ver; drained (a shard of a sharded
--                 voucher found, with all its others, at 0 and nothing in
--                 flight: a transfer that gives it units since holds them)
-- KEYS[3] buyers  hash: user id -> order id
-- KEYS[4] orders  stream: the admitted orders (field user)
-- KEYS[5] changes list: "ver:user,…" for each bump of ver, the oldest
--                 first ('*' for too many users)
-- KEYS[6] cancelled hash: user id -> cancelled order id (return_unit.lua)
-- ARGV[1] the ver the copy is at ('0' for none), or '' to read the state
--         alone
-- ARGV[2] the id of the last order entry the copy holds ('0-0' for none)
-- ARGV[3] the most changes, and the most order entries, to read
--
-- Returns {stock, gen, epoch, ver, buyers, last, complete, drained, user,
-- slot, ...}: stock, gen, epoch, ver and drained as strings (nil when
-- absent); buyers, the number of slots (KEYS[3]'s and KEYS[6]'s); last, the id of the newest order
-- entry read (ARGV[2] if none; for ARGV[1] '', the newest entry in the
-- stream, '0-0' if none); complete, 1 if every change since ARGV[1]
-- follows, else 0 (the log does not reach back to ARGV[1], or holds '*',
-- or more than ARGV[3] changes or entries: none follows); then, for each
-- buyer whose slot changed since (maybe twice), the user id and the order
-- id the slot holds (nil: none), KEYS[3]'s, else KEYS[6]'s.
local stock = redis.call('GET', KEYS[1])
local meta = redis.call('HMGET', KEYS[2], 'gen', 'epoch', 'ver', 'drained')
local out = {stock, meta[1], meta[2], meta[3], redis.call('HLEN', KEYS[3]) + redis.call('HLEN', KEYS[6]), ARGV[2], 1, meta[4]}
if ARGV[1] == '' then
  local newest = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
  out[6] = '0-0'
  if #newest > 0 then
    out[6] = newest[1][1]
  end
  return out
end
local max = tonumber(ARGV[3])
local from = tonumber(ARGV[1])
local k = tonumber(meta[3] or '0') - from
if k < 0 or k > max then
  out[7] = 0
  return out
end
local users = {}
if k > 0 then
  local log = redis.call('LRANGE', KEYS[5], -k, -1)
  if #log ~= k then
    out[7] = 0
    return out
  end
  for i, e in ipairs(log) do
    local ver, list = string.match(e, '^(%d+):(.*)$')
    if not ver or tonumber(ver) ~= from + i or list == '*' then
      out[7] = 0
      return out
    end
    for u in string.gmatch(list, '[^,]+') do
      users[#users + 1] = u
    end
  end
end
-- The first entry may be ARGV[2] itself (XRANGE includes its start).
local entries = redis.call('XRANGE', KEYS[4], ARGV[2], '+', 'COUNT', max + 2)
local n = 0
for _, e in ipairs(entries) do
  if e[1] ~= ARGV[2] then
    n = n + 1
    local f = e[2]
    for i = 1, #f, 2 do
      if f[i] == 'user' then
        users[#users + 1] = f[i + 1]
      end
    end
    out[6] = e[1]
  end
end
if n > max then
  out[6] = ARGV[2]
  out[7] = 0
  return out
end
for _, u in ipairs(users) do
  out[#out + 1] = u
  out[#out + 1] = redis.call('HGET', KEYS[3], u) or redis.call('HGET', KEYS[6], u)
end
return out
