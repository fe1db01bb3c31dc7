-- wrk script for tools/bench/admit_bench.sh: POST /v1/admit on the bench plan, and one
-- machine-readable result line: WRK_RESULT <req/s> <p50 us> <p99 us> <requests> <errors>.
wrk.method = "POST"
wrk.body = '{"tenant":"ws-bench","tokens":1}'
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read +
              summary.errors.write + summary.errors.timeout
  io.write(string.format("WRK_RESULT %.1f %.1f %.1f %d %d\n", summary.requests / secs,
                         latency:percentile(50), latency:percentile(99), summary.requests, bad))
end
