-- A write on the lock's own server, made only while the caller holds the lock (the guarded
-- write of `RedisBackend::set_if_held`): the owner check and the SET are one step.
-- KEYS[1]: the lock's key (a string holding the owner token, or the reentrant hash with the
-- token as a field); KEYS[2]: the key written, in the lock's hash slot.
-- ARGV[1]: the owner token; ARGV[2]: the value.
-- Returns 1 when written, 0 when the caller does not hold the lock (nothing written).
--[[ held_by.lua ]]
if not held_by(KEYS[1], ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
return 1
