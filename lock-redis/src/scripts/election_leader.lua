-- Who leads an election, as followers read it: the lock and the leader record in one step, so
-- a record is only ever attributed to the owner that wrote it.
-- KEYS: the election's lock, the leader record.
-- Returns {} when nobody holds the lock (free, or reserved for a waiter's turn); {fence, value}
-- from the record when its owner holds the lock; {'', ''} when the holder left no record of
-- its own (the record was deleted or evicted): a leader whose value and token are unknown.
--[[ held_by.lua ]]
local record = redis.call('HMGET', KEYS[2], 'owner', 'fence', 'value')
if record[1] and held_by(KEYS[1], record[1]) then
  return {record[2] or '', record[3] or ''}
end
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'hash' then
  return {'', ''}
end
--[[ queue.lua ]]
if kind == 'string' and not is_reservation(redis.call('GET', KEYS[1])) then
  return {'', ''}
end
return {}
