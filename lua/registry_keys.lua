-- registry_keys.lua: adds, rotates or revokes an API key of a tenant in the tenant registry.
--
-- A tenant's value in the registry hash is its plan, then its keys: " <sha256 hex>:<expires_at>"
-- each (unix seconds, 0 for never). Only digests are stored. Keys expired at `now` are dropped
-- on every change. A change moves the version and logs the tenant as registry_write.lua does,
-- so every daemon's copy has it within a poll.
--
-- @keys tenants version log
-- @argv tenant op digest expires_at now max_keys log_len
--
-- KEYS: as registry_write.lua
-- ARGV: tenant      an id (checked by the caller)
--       op          "add": the key, valid until expires_at (0: for good);
--                   "rotate": the key for good, every other key ending at expires_at at the
--                   latest (the overlap during which clients move to the new key);
--                   "revoke": the key is gone
--       digest      64 lower-case hex digits (checked by the caller)
--       expires_at  unix seconds (0: never)
--       now         the caller's clock, unix seconds
--       max_keys    the most keys a tenant may hold
--       log_len     how many changes the log keeps
--
-- Returns {1, value, version} done (value: the tenant's value now); {0} the tenant is not in the
-- registry; {-1} revoke of a key the tenant does not have; {-2} more than max_keys keys.

local cur = redis.call('HGET', KEYS[K_TENANTS], ARGV[A_TENANT])
if not cur then return {0} end
local plan = string.match(cur, '^[^ ]*')
local now = tonumber(ARGV[A_NOW])
local op = ARGV[A_OP]
local digest = ARGV[A_DIGEST]
local exp = tonumber(ARGV[A_EXPIRES_AT])
local keys = {}
local found = false
for d, e in string.gmatch(cur, ' (%x+):(%d+)') do
  e = tonumber(e)
  if e == 0 or e > now then
    if d == digest then
      found = true
      if op == 'add' then e = exp elseif op == 'rotate' then e = 0 end
      if op ~= 'revoke' then keys[#keys + 1] = {d, e} end
    else
      if op == 'rotate' and (e == 0 or e > exp) then e = exp end
      keys[#keys + 1] = {d, e}
    end
  end
end
if op == 'revoke' and not found then return {-1} end
if op ~= 'revoke' and not found then keys[#keys + 1] = {digest, op == 'rotate' and 0 or exp} end
if #keys > tonumber(ARGV[A_MAX_KEYS]) then return {-2} end
local value = plan
for _, k in ipairs(keys) do value = value .. ' ' .. k[1] .. ':' .. string.format('%d', k[2]) end
if value == cur then
  return {1, value, tonumber(redis.call('GET', KEYS[K_VERSION]) or '0')}
end
redis.call('HSET', KEYS[K_TENANTS], ARGV[A_TENANT], value)
local v = redis.call('INCR', KEYS[K_VERSION])
redis.call('RPUSH', KEYS[K_LOG], ARGV[A_TENANT])
redis.call('LTRIM', KEYS[K_LOG], -tonumber(ARGV[A_LOG_LEN]), -1)
return {1, value, v}
