-- An election's campaign: the lock kind's acquire script, unchanged (KEYS[1..4] and ARGV[1..4]
-- as documented there, on the election's own keys), and in the step that wins, the leader
-- record and a notice to leader watches. A follower therefore never sees the new leader
-- without its value and fencing token.
-- KEYS[5]: the leader record (a hash: owner, fence, value). ARGV[5]: the leader's value.
-- Returns what the acquire script returns: the fencing token (>= 0) when won, else a refusal.
local function acquire()
--[[ acquire ]]
end
local fence = acquire()
if fence >= 0 then
  redis.call('HSET', KEYS[5], 'owner', ARGV[1], 'fence', string.format('%.0f', fence), 'value', ARGV[5])
  -- A payload that names no waiter (owner tokens are hex): only leader watches wake.
  redis.pcall('PUBLISH', ARGV[4], 'elected')
end
return fence
