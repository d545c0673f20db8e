-- The fair wait queue, shared by every lock script: put where a script has the queue marker
-- (`QUEUE_MARKER` in lua.rs), after its fast path (Redis runs a script as one function, so these are its local helpers, and
-- defining them costs time an uncontended call does not need to spend).
--
-- Two sorted sets hold the waiters of one lock, both in the lock's hash slot (their KEYS index
-- differs per script: KEYS[3] and KEYS[4] in the acquire scripts, KEYS[2] and KEYS[3] in the
-- release and dequeue scripts; the helpers take them as arguments):
--   the queue:    token -> arrival, server time in microseconds; fixes the order and is never
--                 changed by a refresh, so a waiter keeps its place;
--   the timeouts: token -> when the entry lapses, server time in milliseconds; a live waiter
--                 pushes it forward on every retry, a dead one stops doing so.
-- A queue member without a lapse time (an orphan: written by hand, or left by a partial write)
-- could never lapse; queue_head drops such members, so they cannot hold up the lock.
-- Times come from the server's clock (TIME), never a client's, so clients with skewed clocks
-- agree on who has lapsed.

-- The scripts read the server clock (TIME), also after writing: Redis 5 and newer replicate a
-- script's effects, not the script, which allows that (older servers are not supported).

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

-- The token of the longest-waiting live waiter, or nil. Members at the head that have no lapse
-- time in the timeouts set are orphans that would never lapse: they are dropped on the way.
local function queue_head(queue_key, timeout_key)
  while true do
    local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
    if not head or redis.call('ZSCORE', timeout_key, head) then
      return head
    end
    redis.call('ZREM', queue_key, head)
  end
end

-- How long the head of the queue has to take a free lock before its entry lapses: a waiter that
-- died may hold a free lock up for at most this long, not its entry's whole lifetime. A live
-- head, woken by the release message, takes its turn in a few milliseconds; one that misses it
-- (a lost message) lapses and queues again at the back. Mirrored by `TURN` in lock-redis.
local TURN_MS = 250

-- Gives `head` its turn at a free lock: its entry lapses TURN_MS from now unless it takes the
-- lock first (an entry already lapsing sooner keeps its time).
local function give_turn(timeout_key, head, now_ms)
  local lapses = tonumber(redis.call('ZSCORE', timeout_key, head))
  if lapses and lapses > now_ms + TURN_MS then
    redis.call('ZADD', timeout_key, 'XX', whole(now_ms + TURN_MS), head)
  end
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

-- A free `SetNx` lock that is the queue head's turn holds `TURN_PREFIX .. <head's token>` for
-- TURN_MS, so a plain `SET NX` (the transaction of an uncontended acquisition) cannot take it in
-- the head's place. Owner tokens are hex: a reservation never equals one, so extend and release
-- never mistake it for a hold.
local TURN_PREFIX = 'turn:'

local function is_reservation(value)
  return value and string.sub(value, 1, #TURN_PREFIX) == TURN_PREFIX
end

-- Hands a free `SetNx` lock on: reserved for the longest-waiting live waiter, who is told so; or,
-- with nobody live queued, deleted, and everyone told (an empty payload).
local function hand_over(lock_key, queue_key, timeout_key, channel, now_ms)
  prune_queue(queue_key, timeout_key, now_ms)
  local head = queue_head(queue_key, timeout_key)
  if head then
    redis.call('SET', lock_key, TURN_PREFIX .. head, 'PX', TURN_MS)
    give_turn(timeout_key, head, now_ms)
  else
    redis.call('DEL', lock_key)
  end
  redis.pcall('PUBLISH', channel, head or '')
end

-- Tells subscribers the lock is free. The payload names the waiter whose turn it is, so only
-- that one retries at once; an empty payload (no live waiter) wakes everyone. PUBLISH runs under
-- pcall: a refusal (an ACL user without rights on the channel) must not turn the release, which
-- already happened, into an error; waiters then find out by their own re-check.
local function announce_release(queue_key, timeout_key, channel, now_ms)
  prune_queue(queue_key, timeout_key, now_ms)
  local head = queue_head(queue_key, timeout_key)
  if head then
    give_turn(timeout_key, head, now_ms)
  end
  redis.pcall('PUBLISH', channel, head or '')
end

-- A refusal, as the acquire scripts return it: -1 - (how long the caller should wait at most
-- before retrying unprompted, in ms). That is the lock's remaining lease (or turn), or, while the
-- lock is free but another waiter's turn, until that waiter's entry would lapse; never 0, which
-- would make the caller spin. Plain -1 when there is no bound (a lock without expiry, or no lapse
-- time known): the caller falls back to its normal re-check. (A grant returns the fencing token,
-- >= 0: one number, which costs the server less than a table.)
local function refusal(lock_key, queue_key, timeout_key, now_ms)
  local pttl = redis.call('PTTL', lock_key)
  if pttl == -1 then
    return -1
  end
  if pttl >= 0 then
    return -1 - math.max(pttl, 1)
  end
  local head = queue_head(queue_key, timeout_key)
  if head then
    local lapses = tonumber(redis.call('ZSCORE', timeout_key, head))
    if lapses then
      return -1 - math.max(lapses - now_ms, 1)
    end
  end
  return -1
end

