-- wrk script for tools/chaos.sh's outage scenario: each connection admits (an estimate of 100
-- LLM tokens) and settles what it was admitted (60 used), as an agent does. The settle of an
-- admission goes out on the next request of the same thread. Counted per thread and printed
-- once: CHAOS_RESULT <admits allowed> <settles settled> <failures> <settles not settled>,
-- so that the quota Redis ends with can be compared with what the clients were told.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

local ids = {}
local admits, settles, admit_fail, settle_fail = 0, 0, 0, 0

function request()
  local rid = table.remove(ids)
  if rid then
    return wrk.format(nil, "/v1/settle", nil,
                      '{"tenant":"ws-chaos","request_id":"' .. rid .. '","tokens":60}')
  end
  return wrk.format(nil, "/v1/admit", nil, '{"tenant":"ws-chaos","tokens":100}')
end

-- A thread's connections answer interleaved, so an answer is known by its body: a settle's
-- says "settled", an admission's carries its request_id. A failure of either is a failure.
function response(status, headers, body)
  local rid = body:match('"request_id":"([^"]+)"')
  if status == 200 and body:match('"settled":true') then
    settles = settles + 1
  elseif status == 200 and body:match('"settled"') then
    settle_fail = settle_fail + 1
  elseif status == 200 and rid then
    admits = admits + 1
    table.insert(ids, rid)
  else
    admit_fail = admit_fail + 1
  end
  admits_g, settles_g, admit_fail_g, settle_fail_g = admits, settles, admit_fail, settle_fail
end

function done(summary, latency, requests)
  local a, s, af, sf = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    a = a + (t:get("admits_g") or 0)
    s = s + (t:get("settles_g") or 0)
    af = af + (t:get("admit_fail_g") or 0)
    sf = sf + (t:get("settle_fail_g") or 0)
  end
  io.write(string.format("CHAOS_RESULT %d %d %d %d\n", a, s, af, sf))
end
