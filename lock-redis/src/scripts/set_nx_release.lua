-- Single-node lock: delete the lock if the caller's token still holds it; with waiters queued,
-- reserve it for the head instead and tell the head (`hand_over`).
-- KEYS: lock, queue, queue timeouts — or the lock alone (a lone release: a slot migration
-- refused the full one with TRYAGAIN, the queue's keys being absent on the node asked; the
-- queue is then out of reach, so every waiter is woken and the acquire script, which serves
-- the queue first, picks the next holder). ARGV: owner token, release channel, 1 if the
-- releasing client is non-fair (its waiters do not queue) else 0 (or absent).
-- Returns 1 if released, 0 if the lock was not held under this token.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local lone = #KEYS == 1
-- Every fair waiter joins the queue before it waits: no queue, no fair waiter to wake; non-fair
-- waiters hear of every release of a non-fair client (an empty payload wakes them all).
if lone or redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1])
  if lone or ARGV[3] == '1' then
    redis.pcall('PUBLISH', ARGV[2], '')
  end
  return 1
end
--[[ queue.lua ]]
hand_over(KEYS[1], KEYS[2], KEYS[3], ARGV[2], server_time())
return 1
