-- Single-node lock: delete the lock if the caller's token still holds it; with waiters queued,
-- reserve it for the head instead and tell the head (`hand_over`).
-- KEYS: lock, queue, queue timeouts. ARGV: owner token, release channel.
-- Returns 1 if released, 0 if the lock was not held under this token.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- Every blocking waiter joins the queue before it waits: no queue, nobody to wake.
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
--[[ queue.lua ]]
hand_over(KEYS[1], KEYS[2], KEYS[3], ARGV[2], server_time())
return 1
