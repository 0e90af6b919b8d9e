#!lua
-- withdraw_code: take back a phone's login code that could not be sent.
--
-- KEYS[1] code      string: the current code
-- KEYS[2] tries     string: wrong tries against the current code
-- KEYS[3] cooldown  string: present while no new code may be issued
-- ARGV[1] the code that was not sent
--
-- Returns 1 when the code was the phone's and is deleted, with the wrong
-- tries and the cooldown (the phone may ask again at once); 0 when the
-- phone's code is another or none, and nothing is changed.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
