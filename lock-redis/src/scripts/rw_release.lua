-- Read-write lock: release a read or write lease if the caller still holds it.
-- KEYS: the lease's own key only — readers for 'r', writer for 'w' (see rw_extend.lua).
-- ARGV: owner token, 'r' or 'w', release channel.
-- Returns 1 if released, 0 if not held. A release wakes every waiter of the lock (an empty
-- message on the channel); PUBLISH runs under pcall, so a user without rights on the channel
-- still releases (its waiters then find out on their own, at their backoff's pace).
if ARGV[2] == 'w' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    redis.pcall('PUBLISH', ARGV[3], '')
    return 1
  end
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not ends then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.pcall('PUBLISH', ARGV[3], '')
if ends <= now then
  return 0
end
return 1
