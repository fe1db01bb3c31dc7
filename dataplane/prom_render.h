// The dataplane's counters as Prometheus text (format 0.0.4), for GET /metrics on the main lcore
// (common/metrics_http.h serves it). Rendered from what the stats and telemetry read (Stats,
// the scheduler's counters and rates in force, the flow table's size): nothing is counted for
// it on the packet path. Names and labels: docs/ARCHITECTURE.md, "Metrics".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/latency_hist.h"

namespace dripgate::dataplane {

struct Stats;

// The configuration in force (its classes' queue depths) and the flow table's fill.
struct MetricsContext {
  const config::Dataplane* running = nullptr;
  uint64_t flows = 0;
  uint64_t flow_capacity = 0;
};

std::string render_metrics(const Stats& stats, const MetricsContext& ctx);

// The departure-lateness histogram's upper bounds, in seconds (negative: left before the slot).
const std::vector<double>& lateness_bounds();
// Cumulative counts of h's samples at or below each bound of `bounds` (seconds, ascending).
// Exact below 1024 ns, where the histogram has a bucket per ns; above, a bucket that straddles
// a bound counts above it (at most 3.2 % of the bound off), so no bucket overstates.
std::vector<uint64_t> cumulative_at(const LatencyHist::Snapshot& h,
                                    const std::vector<double>& bounds);

}  // namespace dripgate::dataplane
