-- Redlock, on one node: extend the lease if the caller's token still holds the lock; either way
-- raise the node's fencing counter to the caller's token.
-- KEYS: lock, fence. ARGV: owner token, lease (ms), fencing token.
-- Returns 1 if extended, 0 if this node does not hold the lock for this token.
raise_fence(KEYS[2], ARGV[3])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
