// A profile of inter-arrival times, independent of where the data came from: the eBPF probe's
// maps (live) or a capture file (pcap). Both fill the same log-linear buckets of ebpf/iat.h, so a
// live profile and a pcap profile compare figure by figure. builder.h makes one; text.h, json.h,
// svg.h and compare.h render it.
#pragma once

#include <array>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "tools/iat/histogram.h"

namespace dripgate::iat {

// Exact moments of the inter-arrival values, available when every timestamp was seen (pcap).
struct ExactStats {
  uint64_t min_ns = 0;
  uint64_t max_ns = 0;
  long double sum = 0;
  long double sum_sq = 0;
};

// Tolerances of the interval fit: MoonGen's pacing table (±64 to ±512 ns) plus ±1 us.
inline constexpr uint64_t kIntervalTolerances[] = {64, 128, 256, 512, 1000};

// How far each inter-arrival lies from an ideal interval (1/rate of a paced stream): the
// receiver-side counterpart of a pacer's departure error, so a shaper without a schedule (Linux
// tc) and one with (the dataplane) are judged alike. Exact: kept only when every timestamp was
// seen (pcap).
struct IntervalFit {
  uint64_t interval_ns = 0;
  uint64_t gaps = 0;
  // Gaps with |gap - interval| <= kIntervalTolerances[i].
  std::array<uint64_t, std::size(kIntervalTolerances)> within{};
  // |gap - interval| by nearest rank: the smallest deviation with at least that share of the
  // gaps at or below it (as the dataplane's departure-error percentiles).
  uint64_t p50_ns = 0, p99_ns = 0, p999_ns = 0, max_ns = 0;
  double rate_offset = 0;  // mean rate * interval - 1: the long-run rate error

  double share_within(size_t i) const {
    return gaps ? static_cast<double>(within[i]) / static_cast<double>(gaps) : 0.0;
  }
};

struct WindowProfile {
  uint64_t width_ns = 0;
  uint64_t max_count = 0;  // most packets seen in one window
  uint64_t windows = 0;    // windows that held at least one packet
  double peak_rate_pps = 0;
  double burst_factor = 0;  // peak_rate_pps / mean_rate_pps
  CountHistogram count_hist{};
};

struct Profile {
  std::string source;  // "pcap FILE [filter]" or "live IF ingress"
  std::string mode;    // "pcap" or "live"
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  uint64_t capture_ns = 0;        // live: how long the probe was attached
  uint64_t ts_resolution_ns = 1;  // pcap: 1000 when the file only carries microseconds
  uint64_t out_of_order = 0;      // pcap: stamps earlier than their predecessor; not intervals
  uint64_t filtered_out = 0;      // live: packets the probe saw but the filter rejected
  Histogram hist{};
  std::optional<ExactStats> exact;
  std::vector<WindowProfile> windows;
  std::optional<IntervalFit> interval;  // pcap with an ideal interval given

  // Derived by finish(); stored in JSON so compare needs no recomputation.
  uint64_t intervals = 0;
  double duration_s = 0;     // last - first
  double mean_rate_pps = 0;  // intervals / duration: the rate the mean inter-arrival implies
  double mean_iat_ns = 0;
  double cv = 0;
  bool cv_exact = false;
  std::vector<Percentile> percentiles;
  double max_iat_ns = 0;  // exact in pcap mode; else the upper bound of the highest bucket
  bool max_exact = false;

  // Computes the derived figures from the counters above.
  void finish();
};

}  // namespace dripgate::iat
