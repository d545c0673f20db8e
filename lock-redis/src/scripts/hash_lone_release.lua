-- Reentrant hash lock: give back one hold by the lock key alone, for a slot migration that
-- refuses the full release (see set_nx_lone_release.lua). The last hold deletes the lock and
-- wakes every waiter (an empty message); the acquire script still serves the queue first.
-- KEYS: lock. ARGV: owner token, release channel.
-- Returns 1 if a hold was given back, 0 if the lock was not held under this token.
local holds = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not holds then
  return 0
end
if holds > 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  return 1
end
redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', ARGV[2], '')
return 1
