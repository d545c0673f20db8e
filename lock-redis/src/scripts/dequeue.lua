-- A waiter gives up (deadline or error): it leaves the queue, and if it was holding up a free
-- lock as the head, the next waiter is told it is its turn.
-- KEYS: lock, queue, queue timeouts. ARGV: owner token, release channel.
-- Returns 1 if the waiter was queued, 0 otherwise.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if removed == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  local now_ms = server_time()
  prune_queue(KEYS[2], KEYS[3], now_ms)
  local head = queue_head(KEYS[2], KEYS[3])
  if head then
    give_turn(KEYS[3], head, now_ms)
    -- pcall: a client may lack rights on the channel; the dequeue itself stands (the next
    -- waiter re-checks on its own).
    redis.pcall('PUBLISH', ARGV[2], head)
  end
end
return removed
