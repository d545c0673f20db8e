-- Single-node lock, the queued attempt: a waiter's retries, and a call whose transaction (the
-- uncontended path, `MULTI EXISTS queue; SET lock NX PX; INCR fence EXEC`, in Rust) found the
-- lock free with waiters queued. The queue decides: a free lock, or one reserved for the head's
-- turn, goes to the longest-waiting live waiter; a newcomer only gets it when nobody is queued,
-- so a releaser that re-locks at once cannot starve the queue.
-- KEYS: lock, fence, queue, queue timeouts.
-- ARGV: owner token, lease (ms), queue entry lifetime (ms) if the caller waits (joins the queue),
--       else 0; release channel.
-- Returns the fencing token (>= 0) when acquired, else a refusal (< 0, see `refusal`).
local lock_key, fence_key, queue_key, timeout_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, lease, entry_ttl, channel = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
--[[ queue.lua ]]
local now_ms, now_us = server_time()
prune_queue(queue_key, timeout_key, now_ms)
local holder = redis.call('GET', lock_key)
if not holder or is_reservation(holder) then
  local head = queue_head(queue_key, timeout_key)
  if head == nil or head == token then
    redis.call('SET', lock_key, token, 'PX', lease)
    leave_queue(queue_key, timeout_key, token)
    return redis.call('INCR', fence_key)
  end
  -- The head's turn: it must take the lock soon, or lapse (a dead head holds it up briefly). A
  -- free lock, or one reserved for a waiter that lapsed since, is reserved for it and it is told.
  if holder ~= TURN_PREFIX .. head then
    hand_over(lock_key, queue_key, timeout_key, channel, now_ms)
  end
end
if entry_ttl > 0 then
  join_queue(queue_key, timeout_key, token, now_ms, now_us, entry_ttl)
end
return refusal(lock_key, queue_key, timeout_key, now_ms)
