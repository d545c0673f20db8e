-- Semaphore: one attempt to take one of N permits.
-- KEYS: holders (sorted set: owner token -> lease end, server ms), count (string: the N the
--       holders use, living as long as the holders), fencing counter.
-- ARGV: owner token, N, lease (ms).
-- Returns {fencing token, 0} on success, {-1, 0} when every permit is held, {-2, N on the
-- server} when the holders use another N (a mismatch: admitting would over-admit).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
local count = redis.call('GET', KEYS[2])
if held > 0 and count and count ~= ARGV[2] then
  return {-2, tonumber(count)}
end
if held >= tonumber(ARGV[2]) then
  return {-1, 0}
end
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[3])), ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[2], last[2])
return {redis.call('INCR', KEYS[3]), 0}
