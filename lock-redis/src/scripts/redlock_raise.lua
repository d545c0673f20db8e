-- Redlock, on one node: raise its fencing counter to a token issued from other nodes' counters,
-- right after the grant, so that a later acquisition hearing only from this node still gets a
-- higher token. KEYS: fence. ARGV: token. Returns 1.
raise_fence(KEYS[1], ARGV[1])
return 1
