-- The fair wait queue, shared by every lock script (prepended to each; Redis runs a script as
-- one function, so these are its local helpers).
--
-- Two sorted sets hold the waiters of one lock, both in the lock's hash slot:
--   the queue    (KEYS[3]): token -> arrival, server time in microseconds; fixes the order and is
--                           never changed by a refresh, so a waiter keeps its place;
--   the timeouts (KEYS[4]): token -> when the entry lapses, server time in milliseconds; a live
--                           waiter pushes it forward on every retry, a dead one stops doing so.
-- Times come from the server's clock (TIME), never a client's, so clients with skewed clocks
-- agree on who has lapsed.

-- The scripts read the server clock (TIME) before writing. Redis 5+ replicates a script's
-- effects, which allows that; older servers must be asked to.
if redis.replicate_commands then
  redis.replicate_commands()
end

-- Numbers are passed to redis.call as strings in full: Lua would print 1.7e15 as "1.7e+15".
local function whole(number)
  return string.format('%.0f', number)
end

-- (milliseconds, microseconds) since the epoch, by the server's clock.
local function server_time()
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  return seconds * 1000 + math.floor(micros / 1000), seconds * 1000000 + micros
end

-- Drops the waiters whose entries lapsed: they died, or stopped waiting without saying so.
local function prune_queue(queue_key, timeout_key, now_ms)
  local lapsed = redis.call('ZRANGEBYSCORE', timeout_key, '-inf', whole(now_ms))
  for _, token in ipairs(lapsed) do
    redis.call('ZREM', queue_key, token)
  end
  if #lapsed > 0 then
    redis.call('ZREMRANGEBYSCORE', timeout_key, '-inf', whole(now_ms))
  end
end

-- The token of the longest-waiting live waiter, or nil.
local function queue_head(queue_key)
  return redis.call('ZRANGE', queue_key, 0, 0)[1]
end

-- Joins the queue (keeping an earlier place) and pushes this waiter's lapse time forward.
local function join_queue(queue_key, timeout_key, token, now_ms, now_us, entry_ttl)
  redis.call('ZADD', queue_key, 'NX', whole(now_us), token)
  redis.call('ZADD', timeout_key, whole(now_ms + entry_ttl), token)
  -- Every entry lapses within entry_ttl of now, so the sets may too: they never outlive their
  -- waiters.
  redis.call('PEXPIRE', queue_key, entry_ttl)
  redis.call('PEXPIRE', timeout_key, entry_ttl)
end

local function leave_queue(queue_key, timeout_key, token)
  redis.call('ZREM', queue_key, token)
  redis.call('ZREM', timeout_key, token)
end

-- Tells subscribers the lock is free. The payload names the waiter whose turn it is, so only
-- that one retries at once; an empty payload (no live waiter) wakes everyone.
local function announce_release(queue_key, timeout_key, channel, now_ms)
  prune_queue(queue_key, timeout_key, now_ms)
  redis.call('PUBLISH', channel, queue_head(queue_key) or '')
end

-- How long a caller that did not get the lock should wait at most before retrying unprompted:
-- the lock's remaining lease, or, while the lock is free but another waiter's turn, until that
-- waiter's entry would lapse. -1 when there is no bound (a lock without expiry).
local function retry_hint(lock_key, queue_key, timeout_key, now_ms)
  local pttl = redis.call('PTTL', lock_key)
  if pttl >= 0 or pttl == -1 then
    return pttl
  end
  local head = queue_head(queue_key)
  if head then
    local lapses = tonumber(redis.call('ZSCORE', timeout_key, head))
    if lapses then
      return math.max(lapses - now_ms, 1)
    end
  end
  return 0
end

