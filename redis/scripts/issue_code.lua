#!lua
-- issue_code: store a phone's login code unless one was issued too recently.
--
-- KEYS[1] code      string: the current code
-- KEYS[2] tries     string: wrong tries against the current code
-- KEYS[3] cooldown  string: present while no new code may be issued
-- ARGV[1] the code
-- ARGV[2] how long the code is valid, milliseconds
-- ARGV[3] how long until another code may be issued, milliseconds
--
-- Returns 0 when the code is stored, else the milliseconds left until
-- another code may be issued.
local wait = redis.call('PTTL', KEYS[3])
if wait > 0 then
  return wait
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
return 0
