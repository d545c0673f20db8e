-- Single-node lock: release by the lock key alone, for a slot migration that refuses the full
-- release (`TRYAGAIN`: Redis refuses a script whose keys are partly absent while their slot
-- migrates, and the queue's keys usually are absent). Deletes the lock if the caller's token
-- still holds it and wakes every waiter (an empty message): with the queue out of reach, the
-- head is not handed the lock, but the acquire script still serves the queue first.
-- KEYS: lock. ARGV: owner token, release channel.
-- Returns 1 if released, 0 if the lock was not held under this token.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', ARGV[2], '')
return 1
