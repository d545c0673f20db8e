-- Whether `token` holds the exclusive lock at `lock_key`: the owner token in a string (`SetNx`,
-- a write lock) or a field of the reentrant hash. A `SetNx` reservation (`turn:<token>`) is
-- nobody's hold: owner tokens are hex, so it never equals one.
local function held_by(lock_key, token)
  local kind = redis.call('TYPE', lock_key).ok
  if kind == 'hash' then
    return redis.call('HEXISTS', lock_key, token) == 1
  end
  return kind == 'string' and redis.call('GET', lock_key) == token
end
