-- lib_waiters.lua: the order of waiters on a global gate across workers and daemons (gates.lua).
-- Not a script of its own: tools/embed.py puts this text in place of a
-- `-- @include lib_waiters.lua` line.
--
-- Each worker of each daemon orders its own waiters (the gateway's WaitQueue: by band, then round
-- robin across tenants); what Redis keeps is each worker's first waiter on the gate, in the
-- gate's own slot: the hash "dg:{g:<kind>:<name>}:wq", field = the worker's holder id, value
-- "<band> <since µs> <cost> <until ms>". since is Redis TIME when that worker's turn on the gate
-- began (its first waiter came, or its last one was served), so that among the workers of a
-- band the one that has waited longest goes first and one just served goes last: round robin
-- across workers. until is when the entry stops counting (a worker that went away holds nothing
-- back for long): at most twice the wait the gate named, plus 250 ms, and never past the
-- last deadline of the worker's waiters on the gate (left_ms); each call of that worker's first
-- waiter renews it.
--
-- A worker whose entry a higher band takes over (a band-0 request came to a worker whose first
-- waiter was of band 1) keeps its lower band's turn in the field "<holder>:<band>" (cost 0: it
-- holds nothing back), and takes it up again when it is back to that band: a worker that also
-- serves a higher band does not lose its place in a lower one each time.
--
-- A call may take the gate's tokens only beyond what the entries ahead of it need: those of a
-- higher band, and of its own band the ones whose turn began earlier. The first waiter of a
-- worker counts from its own entry's since; any other call (a request that may wait, or one that
-- may not, which counts as band 8, after every waiter) is a newcomer whose turn begins now, so it
-- comes after every entry of its band. So a later request cannot take a token while an earlier
-- one waits on another box, tokens beyond the waiters' needs still pass, and the cost is one
-- HGETALL of an empty key when nobody waits.

-- The entries of the registry at key other than a first waiter's own (holder), each {band, since,
-- cost}, deleting those past their time; this holder's fresh entry as {band, since, until}, or
-- nil; and its kept turns, band -> since. A newcomer's own entry is among the others: it comes
-- after its own worker's first waiter too.
local function waiters_read(key, holder, head, now_us)
  local q = redis.call('HGETALL', key)
  local others, mine, kept = {}, nil, {}
  if #q == 0 then return others, mine, kept end
  local now_ms = math.floor(now_us / 1000)
  local own = holder .. ':'
  for k = 1, #q, 2 do
    local f = q[k]
    local b, s, c, e = string.match(q[k + 1], '^(%d+) (%d+) (%S+) (%d+)$')
    if not b or e + 0 <= now_ms then
      redis.call('HDEL', key, f)
    elseif string.sub(f, 1, #own) == own then
      kept[b + 0] = s + 0
    elseif c + 0 > 0 then  -- not another worker's kept turn
      if f == holder then mine = {b + 0, s + 0, e + 0} end
      if not (head and f == holder) then others[#others + 1] = {b + 0, s + 0, c + 0} end
    end
  end
  return others, mine, kept
end

-- What the entries ahead of a call of `band` whose turn began at since need of the gate first.
local function waiters_ahead(others, band, since)
  local need = 0
  for i = 1, #others do
    local o = others[i]
    if o[1] < band or (o[1] == band and o[2] < since) then need = need + o[3] end
  end
  return need
end

-- Sets holder's entry and keeps the hash at least until `until_ms`.
local function waiters_keep(key, holder, band, since, cost, until_ms, now_ms)
  -- %d: Lua would write a number of 16 digits as 1.7e+15.
  redis.call('HSET', key, holder, string.format('%d %d %s %d', band, since, cost, until_ms))
  if redis.call('PTTL', key) < until_ms - now_ms then
    redis.call('PEXPIRE', key, until_ms - now_ms + 1000)
  end
end
