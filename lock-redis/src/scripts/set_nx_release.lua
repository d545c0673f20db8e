-- Single-node lock: delete the lock if the caller's token still holds it, and announce the
-- release to waiters.
-- KEYS: lock, queue, queue timeouts. ARGV: owner token, release channel, lease (ms; unused).
-- Returns 1 if released, 0 if the lock was not held under this token.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
-- Every blocking waiter joins the queue before it waits: no queue, nobody to wake.
if redis.call('EXISTS', KEYS[2]) == 1 then
  announce_release(KEYS[2], KEYS[3], ARGV[2], server_time())
end
return 1
