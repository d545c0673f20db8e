-- Reentrant hash lock (the seeds' Redisson layout): a hash whose one field is the holder's token
-- and whose value is its hold count. A fresh acquisition also takes the next fencing token; a
-- reentry by the same token counts one more hold and returns the token already issued.
-- KEYS: lock, fence, queue, queue timeouts.
-- ARGV: owner token, lease (ms), "1" if the caller waits (joins the queue) else "0",
--       queue entry lifetime (ms).
-- Returns {1, fencing token} when acquired, {0, retry hint in ms} otherwise.
local lock_key, fence_key, queue_key, timeout_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, lease, waiting, entry_ttl = ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local queued = redis.call('EXISTS', queue_key) == 1

if redis.call('EXISTS', lock_key) == 0 then
  -- Fast path, the uncontended case: with nobody queued a free lock goes to the caller at once,
  -- without reading the clock or touching the queue.
  if not queued then
    redis.call('HINCRBY', lock_key, token, 1)
    redis.call('PEXPIRE', lock_key, lease)
    return {1, redis.call('INCR', fence_key)}
  end
elseif redis.call('HEXISTS', lock_key, token) == 1 then
  -- Reentry: nobody else can have acquired since this token did, so the counter still holds
  -- the token issued then. The lease is only ever raised, never shortened: the outer hold may
  -- have asked for a longer one than this reentry, and it is still held.
  redis.call('HINCRBY', lock_key, token, 1)
  local pttl = redis.call('PTTL', lock_key)
  if pttl >= 0 and pttl < tonumber(lease) then
    redis.call('PEXPIRE', lock_key, lease)
  end
  return {1, tonumber(redis.call('GET', fence_key) or '0')}
end

-- The lock is held by someone else, or free with waiters queued: the queue decides.
local now_ms, now_us = server_time()
prune_queue(queue_key, timeout_key, now_ms)
if redis.call('EXISTS', lock_key) == 0 then
  local head = queue_head(queue_key, timeout_key)
  if head == nil or head == token then
    redis.call('HINCRBY', lock_key, token, 1)
    redis.call('PEXPIRE', lock_key, lease)
    leave_queue(queue_key, timeout_key, token)
    return {1, redis.call('INCR', fence_key)}
  end
  -- The head's turn: it must take the lock soon, or lapse (a dead head holds it up briefly).
  give_turn(timeout_key, head, now_ms)
end
if waiting then
  join_queue(queue_key, timeout_key, token, now_ms, now_us, entry_ttl)
end
return {0, retry_hint(lock_key, queue_key, timeout_key, now_ms)}
