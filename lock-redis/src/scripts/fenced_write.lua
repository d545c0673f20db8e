-- A fenced write (lock_core::FencedStore): stores the value with its fencing token unless a
-- higher token has written the key.
-- KEYS[1]: the key's hash (fields `fence` and `value`).
-- ARGV[1]: the token, in decimal; ARGV[2]: the value.
-- Returns nil when written, else the highest token (a string), which refused it.
local highest = redis.call('HGET', KEYS[1], 'fence')
-- Tokens are compared as decimal strings: Lua numbers are doubles, exact only below 2^53.
if highest and (#highest > #ARGV[1] or (#highest == #ARGV[1] and highest > ARGV[1])) then
    return highest
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return false
