-- Redlock's fencing helper, prepended to the extend and release scripts (Redis runs a script as
-- one function, so this is its local helper).

-- Raises this node's fencing counter to at least `token`, the token the caller was issued from
-- the answers of every node it heard. A monotonic, idempotent step: later acquisitions that hear
-- from this node then get a higher token, even if the nodes that issued `token` are gone.
local function raise_fence(fence_key, token)
  local seen = tonumber(redis.call('GET', fence_key) or '0')
  if seen < tonumber(token) then
    redis.call('SET', fence_key, token)
  end
end
