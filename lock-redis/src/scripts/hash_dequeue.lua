-- Reentrant hash lock: a waiter gives up (deadline or error). It leaves the queue, and if it was
-- holding up a free lock as the head, the next waiter is told it is its turn.
-- KEYS: lock, queue, queue timeouts. ARGV: owner token, release channel.
-- Returns 1 if the waiter was queued, 0 otherwise.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
--[[ queue.lua ]]
if removed == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  announce_release(KEYS[2], KEYS[3], ARGV[2], server_time())
end
return removed
