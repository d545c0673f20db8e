-- Read-write lock: one attempt to take the read or the write lock.
-- KEYS: readers (sorted set: owner token -> lease end, server ms), writer (string: the writer's
--       owner token, with the lease as its TTL), waiting writers (sorted set: owner token -> end
--       of its place in line, server ms), fencing counter.
-- ARGV: owner token, 'r' or 'w', lease (ms), place in line for a waiting writer (ms, 0: none).
-- Returns the fencing token on success, -1 when the lock is taken (or a writer waits).
--
-- Readers share unless another owner's writer holds the lock or a writer waits for it (writers
-- are not starved); a reader under the writer's own owner token is the writer taking the read
-- lock too (a downgrade path), admitted past its own write lock. A writer needs the lock free of
-- every reader and writer; refused, it marks its place in line for ARGV[4] ms, which holds new
-- readers back until it gets the lock or stops renewing the mark.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local owner, lease = ARGV[1], tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local writer = redis.call('GET', KEYS[2])

-- Numbers in full: Lua would print 1.7e15 as "1.7e+15".
local function whole(number)
  return string.format('%.0f', number)
end

-- A sorted set of lease ends lives as long as its last entry.
local function expire_with_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', key, last[2])
  end
end

if ARGV[2] == 'r' then
  if writer then
    if writer ~= owner then
      return -1
    end
  elseif redis.call('ZCARD', KEYS[3]) > 0 then
    return -1
  end
  redis.call('ZADD', KEYS[1], whole(now + lease), owner)
  expire_with_last(KEYS[1])
else
  if writer or redis.call('ZCARD', KEYS[1]) > 0 then
    local mark = tonumber(ARGV[4])
    if mark > 0 then
      redis.call('ZADD', KEYS[3], whole(now + mark), owner)
      expire_with_last(KEYS[3])
    end
    return -1
  end
  redis.call('SET', KEYS[2], owner, 'PX', lease)
  redis.call('ZREM', KEYS[3], owner)
end
return redis.call('INCR', KEYS[4])
