-- An election's leader publishes a new value, written only while the caller still holds the
-- election's lock (the check and the write one step, so a deposed leader never overwrites its
-- successor's value); leader watches are told.
-- KEYS: the election's lock, the leader record.
-- ARGV: owner token, fencing token, value, the election's channel.
-- Returns 1 when written, 0 when the caller does not lead (nothing written).
--[[ held_by.lua ]]
if not held_by(KEYS[1], ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[2], 'owner', ARGV[1], 'fence', ARGV[2], 'value', ARGV[3])
-- A payload that names no waiter (owner tokens are hex): only leader watches wake.
redis.pcall('PUBLISH', ARGV[4], 'proclaimed')
return 1
