-- Semaphore: give a permit back if the caller still holds it.
-- KEYS: holders, count (as sem_acquire.lua). ARGV: owner token, release channel.
-- Returns 1 if released, 0 if not held. A release wakes every waiter (see rw_release.lua).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not ends then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
end
redis.pcall('PUBLISH', ARGV[2], '')
if ends <= now then
  return 0
end
return 1
