-- Reentrant hash lock: give back one hold of the caller's token. While holds remain the lease
-- is left as it is (renewal is the holder's business, and an inner hold's shorter lease must not
-- cut the outer one's); the last one deletes the lock and announces the release to waiters.
-- KEYS: lock, queue, queue timeouts — or the lock alone (a lone release, see
-- set_nx_release.lua: every waiter is woken). ARGV: owner token, release channel, 1 if the
-- releasing client is non-fair (its waiters do not queue) else 0 (or absent).
-- Returns 1 if a hold was given back, 0 if the lock was not held under this token.
local holds = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not holds then
  return 0
end
if holds > 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  return 1
end
redis.call('DEL', KEYS[1])
local lone = #KEYS == 1
-- Every fair waiter joins the queue before it waits: no queue, no fair waiter to wake; non-fair
-- waiters hear of every release of a non-fair client (an empty payload wakes them all).
if lone or redis.call('EXISTS', KEYS[2]) == 0 then
  if lone or ARGV[3] == '1' then
    redis.pcall('PUBLISH', ARGV[2], '')
  end
  return 1
end
--[[ queue.lua ]]
announce_release(KEYS[2], KEYS[3], ARGV[2], server_time())
return 1
