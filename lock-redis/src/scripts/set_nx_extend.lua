-- Single-node lock: extend the lease if the caller's token still holds the lock.
-- KEYS: lock. ARGV: owner token, lease (ms). Returns 1 if extended, 0 if not held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
