-- registry_write.lua: puts a tenant on a plan in the tenant registry, or takes it out.
--
-- Every change moves the registry's version by one and appends the tenant to the change log
-- (capped to its newest `log_len` entries), in the same call: a daemon that holds version v
-- reads the tenants changed since with registry_changes.lua, and the log's last entry is always
-- the change that made the current version.
--
-- @keys tenants version log
-- @argv tenant plan log_len
--
-- KEYS: tenants  hash "dg:{registry}:tenants", tenant -> plan, then the tenant's API keys
--                (registry_keys.lua), which a new plan keeps
--       version  string "dg:{registry}:version", the number of changes ever made
--       log      list "dg:{registry}:log", the tenants of the newest changes, oldest first
-- ARGV: tenant   an id (checked by the caller)
--       plan     the plan's name; "" takes the tenant out of the registry
--       log_len  how many changes the log keeps
--
-- Returns {previous plan ("" when the tenant was not in the registry), version}. Writing what
-- is already there changes nothing (the version stays). Taking a tenant out drops its keys.

local value = redis.call('HGET', KEYS[K_TENANTS], ARGV[A_TENANT]) or ''
local prev = string.match(value, '^[^ ]*')
local plan = ARGV[A_PLAN]
if prev == plan then
  return {prev, tonumber(redis.call('GET', KEYS[K_VERSION]) or '0')}
end
if plan == '' then
  redis.call('HDEL', KEYS[K_TENANTS], ARGV[A_TENANT])
else
  redis.call('HSET', KEYS[K_TENANTS], ARGV[A_TENANT], plan .. string.sub(value, #prev + 1))
end
local v = redis.call('INCR', KEYS[K_VERSION])
redis.call('RPUSH', KEYS[K_LOG], ARGV[A_TENANT])
redis.call('LTRIM', KEYS[K_LOG], -tonumber(ARGV[A_LOG_LEN]), -1)
return {prev, v}
