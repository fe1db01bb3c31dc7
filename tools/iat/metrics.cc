#include "tools/iat/metrics.h"

#include <algorithm>

#include "common/prom_writer.h"
#include "tools/iat/units.h"

namespace dripgate::iat {

BurstTracker::BurstTracker(std::vector<uint64_t> widths_ns, uint64_t period_ns)
    : widths_(std::move(widths_ns)), period_ns_(period_ns) {}

void BurstTracker::tick(uint64_t now_ns, uint64_t packets_total,
                        const std::vector<uint64_t>& peaks) {
  ticks_.push_back({now_ns, packets_total, peaks});
  ticks_.back().peaks.resize(widths_.size());
  // Keep the newest tick at or before the period's start: it opens the period.
  while (ticks_.size() > 2 && now_ns - ticks_[1].at_ns >= period_ns_) ticks_.pop_front();
}

std::vector<BurstTracker::Window> BurstTracker::windows() const {
  std::vector<Window> out(widths_.size());
  for (size_t i = 0; i < widths_.size(); ++i) out[i].width_ns = widths_[i];
  if (ticks_.size() < 2) return out;
  const uint64_t span = ticks_.back().at_ns - ticks_.front().at_ns;
  const uint64_t packets = ticks_.back().packets - ticks_.front().packets;
  for (size_t i = 0; i < widths_.size(); ++i) {
    // The first tick's peaks belong to the period before it.
    for (size_t t = 1; t < ticks_.size(); ++t)
      out[i].peak = std::max(out[i].peak, ticks_[t].peaks[i]);
    if (packets > 0 && span > 0 && widths_[i] > 0)
      out[i].burst_factor = static_cast<double>(out[i].peak) * static_cast<double>(span) /
                            (static_cast<double>(packets) * static_cast<double>(widths_[i]));
  }
  return out;
}

const std::vector<uint64_t>& interarrival_bounds_ns() {
  static const std::vector<uint64_t> b = [] {
    std::vector<uint64_t> v;
    for (unsigned m = 10; m < 35; ++m)
      for (uint64_t q = 4; q < 8; ++q) v.push_back(q << (m - 2));
    return v;
  }();
  return b;
}

std::string render_iat_metrics(const ebpf::Counters& c, const BurstTracker& bursts,
                               const std::string& iface) {
  common::PromWriter w;
  const common::PromWriter::Labels at = {{"iface", iface}};
  w.family("dripgate_iat_packets_total", "counter",
           "Packets the probe counted (matching its filter).");
  w.sample("dripgate_iat_packets_total", at, c.totals.packets);
  w.family("dripgate_iat_bytes_total", "counter", "Bytes of the packets the probe counted.");
  w.sample("dripgate_iat_bytes_total", at, c.totals.bytes);
  w.family("dripgate_iat_filtered_out_total", "counter",
           "Packets the probe saw that its filter left out.");
  w.sample("dripgate_iat_filtered_out_total", at, c.totals.filtered_out);

  // Probe bucket b holds gaps in [iat_bucket_low(b), iat_bucket_low(b + 1)): each bound is an
  // edge, and le counts the gaps below it (a gap of exactly the bound's ns counts above it).
  const std::vector<uint64_t>& bounds_ns = interarrival_bounds_ns();
  std::vector<double> bounds;
  std::vector<uint64_t> cumulative;
  uint64_t below = 0, count = 0;
  unsigned b = 0;
  for (uint64_t edge : bounds_ns) {
    for (; b < IAT_BUCKETS && iat_bucket_low(b) < edge; ++b) below += c.hist[b];
    bounds.push_back(static_cast<double>(edge) / 1e9);
    cumulative.push_back(below);
  }
  for (uint64_t v : c.hist) count += v;
  // The gaps add up to the span from the first to the last packet (a gap two CPUs made
  // negative counts as 0, nanoseconds).
  const double sum = c.totals.last_ns > c.totals.first_ns
                         ? static_cast<double>(c.totals.last_ns - c.totals.first_ns) / 1e9
                         : 0.0;
  w.family("dripgate_iat_interarrival_seconds", "histogram",
           "Gaps between consecutive counted packets.");
  w.histogram("dripgate_iat_interarrival_seconds", at, bounds, cumulative, sum, count);

  const std::vector<BurstTracker::Window> ws = bursts.windows();
  w.family("dripgate_iat_window_peak_packets", "gauge",
           "Most packets in one burst window over the sliding period (serve --period).");
  for (const auto& bw : ws)
    w.sample("dripgate_iat_window_peak_packets",
             {{"iface", iface}, {"window", format_ns(static_cast<double>(bw.width_ns))}}, bw.peak);
  w.family("dripgate_iat_burst_factor", "gauge",
           "Peak packets in one window over the mean per window, over the sliding period (1: "
           "even; 0: no packet).");
  for (const auto& bw : ws)
    w.sample("dripgate_iat_burst_factor",
             {{"iface", iface}, {"window", format_ns(static_cast<double>(bw.width_ns))}},
             bw.burst_factor);
  w.family("dripgate_iat_window_lost_total", "counter",
           "Packets left out of a burst window (other CPUs kept winning its update; expected 0).");
  for (unsigned i = 0; i < IAT_WINDOWS; ++i)
    if (c.windows[i].width_ns)
      w.sample(
          "dripgate_iat_window_lost_total",
          {{"iface", iface}, {"window", format_ns(static_cast<double>(c.windows[i].width_ns))}},
          c.window_lost[i]);
  return w.take();
}

}  // namespace dripgate::iat
