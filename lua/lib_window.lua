-- lib_window.lua: the sliding-window gates of admit.lua and gates.lua, and their undo (refund.lua,
-- ungates.lua). Not a script of its own: tools/embed.py puts this text in place of a
-- `-- @include lib_window.lua` line of a script.
--
-- A window is a sorted set of the admissions of the last W microseconds: member
-- "<request_id>:<attempt>" (one per call), score the Redis TIME of the admission in microseconds.
-- Exact: the admissions in (now - W, now] are counted one by one, so no burst at a window's edge
-- passes more than `limit` in any W, and the wait is the time until the admission that keeps the
-- window full leaves it. A key never seen is an empty window.

-- A score as integer text: Lua's own number-to-text keeps 14 digits, too few for microseconds.
local function window_score(us)
  return string.format('%.0f', us)
end

-- The window at `key` at now_us, for `limit` admissions in w_us: {key, limit, w_us, count (the
-- admissions in the window), wait_ms (0 when the window has room)}. A limit of 0 (a window under
-- a brake of 0) never has room: it waits a day, as a bucket that never refills does.
local function window_read(key, limit, w_us, now_us)
  local from = '(' .. window_score(now_us - w_us)
  local count = redis.call('ZCOUNT', key, from, '+inf')
  local wait_ms = 0
  if count >= limit then
    wait_ms = 86400000
    if limit > 0 then
      -- When the (count - limit + 1)-th oldest leaves, count - limit + 1 have left: room for one.
      local m = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT',
                           count - limit, 1)
      wait_ms = math.ceil((tonumber(m[2]) + w_us - now_us) / 1000)
    end
  end
  return {key = key, limit = limit, w_us = w_us, count = count, wait_ms = wait_ms}
end

-- Admits window w (from window_read) at now (score text, bucket_now_text) for `member`: drops the
-- admissions that left the window (they are not restored by an undo: they were outside the
-- window already), adds the member and keeps the key a little longer than the window. A full
-- window (only a shadow one is admitted full) takes nothing, as an empty shadow bucket takes
-- nothing. Returns whether it took.
local function window_admit(w, now_us, now_text, member)
  if w.count >= w.limit then return false end
  redis.call('ZREMRANGEBYSCORE', w.key, '-inf', window_score(now_us - w.w_us))
  redis.call('ZADD', w.key, now_text, member)
  redis.call('PEXPIRE', w.key, math.ceil(w.w_us / 1000) + 1000)
  return true
end

-- Undoes an admission of `member` into the window at key (nothing when it took nothing).
local function window_untake(key, member)
  return redis.call('ZREM', key, member)
end
