-- Reentrant hash lock (the seeds' Redisson layout): a hash whose one field is the holder's token
-- and whose value is its hold count. A fresh acquisition also takes the next fencing token; a
-- reentry by the same token counts one more hold and returns the token already issued.
-- KEYS: lock, fence, queue, queue timeouts.
-- ARGV: owner token, lease (ms), queue entry lifetime (ms) if the caller waits (joins the queue),
--       else 0; release channel (unused: the same ARGV as `SetNx`'s).
-- Returns the fencing token (>= 0) when acquired, else a refusal (< 0, see `refusal`).
local lock_key, fence_key, queue_key, timeout_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, lease, entry_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

-- Fast path, the uncontended case: a free lock with nobody queued (one read for both keys) goes
-- to the caller at once, without reading the clock or touching the queue.
if redis.call('EXISTS', lock_key, queue_key) == 0 then
  redis.call('HSET', lock_key, token, 1)
  redis.call('PEXPIRE', lock_key, lease)
  return redis.call('INCR', fence_key)
end
local held = redis.call('HGET', lock_key, token)
if held then
  -- Reentry: nobody else can have acquired since this token did, so the counter still holds
  -- the token issued then. The lease is only ever raised, never shortened: the outer hold may
  -- have asked for a longer one than this reentry, and it is still held.
  redis.call('HINCRBY', lock_key, token, 1)
  local pttl = redis.call('PTTL', lock_key)
  if pttl >= 0 and pttl < tonumber(lease) then
    redis.call('PEXPIRE', lock_key, lease)
  end
  return tonumber(redis.call('GET', fence_key) or '0')
end
--[[ queue.lua ]]

-- The lock is held by someone else, or free with waiters queued: the queue decides.
local now_ms, now_us = server_time()
prune_queue(queue_key, timeout_key, now_ms)
if redis.call('EXISTS', lock_key) == 0 then
  local head = queue_head(queue_key, timeout_key)
  if head == nil or head == token then
    redis.call('HSET', lock_key, token, 1)
    redis.call('PEXPIRE', lock_key, lease)
    leave_queue(queue_key, timeout_key, token)
    return redis.call('INCR', fence_key)
  end
  -- The head's turn: it must take the lock soon, or lapse (a dead head holds it up briefly).
  -- Not told again: the release already told it (a free hash lock is never reserved, so this
  -- script cannot tell whether the head heard; it re-checks by its hint if it did not).
  give_turn(timeout_key, head, now_ms)
end
if entry_ttl > 0 then
  join_queue(queue_key, timeout_key, token, now_ms, now_us, entry_ttl)
end
return refusal(lock_key, queue_key, timeout_key, now_ms)
