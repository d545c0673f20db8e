-- Single-node lock: a waiter gives up (deadline or error). It leaves the queue, and if the lock
-- was free or reserved for its turn, the turn passes on (`hand_over`).
-- KEYS: lock, queue, queue timeouts. ARGV: owner token, release channel.
-- Returns 1 if the waiter was queued, 0 otherwise.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
--[[ queue.lua ]]
if removed == 1 then
  local holder = redis.call('GET', KEYS[1])
  if not holder or holder == TURN_PREFIX .. ARGV[1] then
    hand_over(KEYS[1], KEYS[2], KEYS[3], ARGV[2], server_time())
  end
end
return removed
