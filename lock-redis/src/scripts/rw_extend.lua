-- Read-write lock: extend a read or write lease if the caller still holds it.
-- KEYS: the lease's own key only — readers for 'r', writer for 'w' (as rw_acquire.lua): a key
--       the script does not use may be absent, and during a cluster slot migration Redis refuses
--       (TRYAGAIN) a script whose keys are partly absent, which would stop renewals for the
--       whole migration. ARGV: owner token, 'r' or 'w', lease (ms).
-- Returns 1 if extended, 0 if not held.
if ARGV[2] == 'w' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return 1
  end
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not ends or ends <= now then
  return 0
end
local until_ms = string.format('%.0f', now + tonumber(ARGV[3]))
redis.call('ZADD', KEYS[1], until_ms, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
