-- Read-write lock: a waiting writer that gives up takes back its place in line.
-- KEYS: waiting writers (as rw_acquire.lua). ARGV: owner token, release channel.
-- Returns 1 if a mark was removed, 0 if there was none (it had lapsed, or was never made).
-- Readers the mark held back are woken (an empty message on the channel, under pcall as the
-- release's): they need not wait for their next re-check to find the way open.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.pcall('PUBLISH', ARGV[2], '')
  return 1
end
return 0
