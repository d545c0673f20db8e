-- Redlock, on one node: delete the lock if the caller's token still holds it and announce the
-- release to waiters (an empty payload: every waiter retries, there is no queue); either way
-- raise the node's fencing counter to the caller's token.
-- KEYS: lock, fence. ARGV: owner token, fencing token, release channel.
-- Returns 1 if released, 0 if this node did not hold the lock for this token.
raise_fence(KEYS[2], ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- pcall: a PUBLISH refused (an ACL user without rights on the channel) must not turn the
  -- release, which happened, into an error; waiters re-check on their own.
  redis.pcall('PUBLISH', ARGV[3], '')
  return 1
end
return 0
