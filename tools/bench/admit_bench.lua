-- wrk script for tools/bench/admit_bench.sh and admit_tagging.sh: POST /v1/admit on the bench
-- plan, and one machine-readable result line:
-- WRK_RESULT <req/s> <p50 us> <p99 us> <requests> <errors>.
-- With DG_FLOWS=1 in the environment every request carries a new flow (the source port counts
-- up; each wrk thread has its own source address), which the daemon tags on the dataplane.
-- With DG_TENANTS=N every request names one of N tenants "t-0" .. "t-<N-1>" in turn (the plan
-- "*" admits them), so that on a Redis Cluster the admissions spread over the masters.
-- DG_BODY replaces the request body (admit_bench.sh's five-gate request).
wrk.method = "POST"
wrk.body = os.getenv("DG_BODY") or '{"tenant":"ws-bench","tokens":1}'
wrk.headers["Content-Type"] = "application/json"

if os.getenv("DG_FLOWS") == "1" then
  local counter = 0
  local thread_no = 0
  function setup(thread)
    thread_no = thread_no + 1
    thread:set("src", "10.3." .. thread_no .. ".1")
  end
  function request()
    counter = counter + 1
    local body = string.format('{"tenant":"ws-bench","tokens":1,"flow":{"src":"%s","sport":%d,' ..
                               '"dst":"10.9.0.1","dport":8080,"proto":17}}',
                               src, 1024 + counter % 60000)
    return wrk.format(nil, nil, nil, body)
  end
end

if os.getenv("DG_TENANTS") then
  local tenants = tonumber(os.getenv("DG_TENANTS"))
  local counter = math.random(0, tenants - 1)
  function request()
    counter = (counter + 1) % tenants
    return wrk.format(nil, nil, nil, '{"tenant":"t-' .. counter .. '","tokens":1}')
  end
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read +
              summary.errors.write + summary.errors.timeout
  io.write(string.format("WRK_RESULT %.1f %.1f %.1f %d %d\n", summary.requests / secs,
                         latency:percentile(50), latency:percentile(99), summary.requests, bad))
end
