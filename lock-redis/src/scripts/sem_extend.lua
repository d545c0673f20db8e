-- Semaphore: extend a permit's lease if the caller still holds it.
-- KEYS: holders, count (as sem_acquire.lua). ARGV: owner token, lease (ms).
-- Returns 1 if extended, 0 if not held.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not ends or ends <= now then
  return 0
end
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[2], last[2])
return 1
