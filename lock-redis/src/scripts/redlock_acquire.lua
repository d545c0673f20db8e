-- Redlock, on one node: take the lock for the caller's token if it is free (SET NX PX), with the
-- node's next fencing number, in one atomic step.
-- KEYS: lock, fence. ARGV: owner token, lease (ms).
-- Returns {1, fencing number, 0} when granted, also when the lock already carries this very
-- token (the same request arriving twice, after a lost reply);
-- {0, this node's fencing counter + 1, remaining lease in ms (-1: no expiry)} when refused.
local lock_key, fence_key = KEYS[1], KEYS[2]
local token, lease = ARGV[1], ARGV[2]
local holder = redis.call('GET', lock_key)
if not holder then
  redis.call('SET', lock_key, token, 'PX', lease)
  return {1, redis.call('INCR', fence_key), 0}
end
if holder == token then
  redis.call('PEXPIRE', lock_key, lease)
  return {1, tonumber(redis.call('GET', fence_key) or '0'), 0}
end
return {0, tonumber(redis.call('GET', fence_key) or '0') + 1, redis.call('PTTL', lock_key)}
