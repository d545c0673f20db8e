-- Single-node lock: SET key token NX PX lease, plus the fencing counter, in one atomic step,
-- honouring the wait queue.
-- KEYS: lock, fence, queue, queue timeouts.
-- ARGV: owner token, lease (ms), "1" if the caller waits (joins the queue) else "0",
--       queue entry lifetime (ms).
-- Returns {1, fencing token} when acquired, {0, retry hint in ms} otherwise.
local lock_key, fence_key, queue_key, timeout_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, lease, waiting, entry_ttl = ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])

-- Fast path, the uncontended case: with nobody queued a free lock goes to the caller at once,
-- without reading the clock or touching the queue (three commands instead of nine).
local queued = redis.call('EXISTS', queue_key) == 1
if not queued and redis.call('SET', lock_key, token, 'NX', 'PX', lease) then
  return {1, redis.call('INCR', fence_key)}
end

local now_ms, now_us = server_time()
prune_queue(queue_key, timeout_key, now_ms)
if redis.call('EXISTS', lock_key) == 0 then
  -- A free lock goes to the longest-waiting live waiter; a newcomer (or a non-waiting try) only
  -- gets it when nobody is queued, so a releaser that re-locks at once cannot starve the queue.
  local head = queue_head(queue_key, timeout_key)
  if head == nil or head == token then
    redis.call('SET', lock_key, token, 'PX', lease)
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
