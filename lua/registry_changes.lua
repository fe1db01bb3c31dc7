-- registry_changes.lua: what changed in the tenant registry since a daemon's version.
--
-- @keys tenants version log
-- @argv since max
--
-- KEYS: as registry_write.lua
-- ARGV: since  the version the caller holds; -1 when it holds none
--       max    the most changes worth sending one by one (more: the caller reads it all)
--
-- Returns {version} when nothing changed; {version, "full"} when the caller must read the whole
-- registry (it holds none, more than `max` changes or more than the log keeps happened, or the
-- registry is older than its copy: Redis lost its data); else {version, "changes", tenant_1,
-- plan_1, ...}, each changed tenant once with its value now (its plan and keys, as the hash
-- holds it; "" when it was taken out).

local v = tonumber(redis.call('GET', KEYS[K_VERSION]) or '0')
local since = tonumber(ARGV[A_SINCE])
if v == since then return {v} end
local n = v - since
if since < 0 or n < 0 or n > tonumber(ARGV[A_MAX]) or n > redis.call('LLEN', KEYS[K_LOG]) then
  return {v, 'full'}
end
local out = {v, 'changes'}
local seen = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[K_LOG], -n, -1)) do
  if not seen[id] then
    seen[id] = true
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', KEYS[K_TENANTS], id) or ''
  end
end
return out
