#include "tools/lab/ring_model.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace dripgate::lab {
namespace {

// Most stamps inside any window [t, t + width) (two pointers over the sorted stamps).
uint64_t peak_in(const std::vector<uint64_t>& t, uint64_t width) {
  uint64_t best = 0;
  for (size_t lo = 0, hi = 0; hi < t.size(); ++hi) {
    while (t[hi] - t[lo] >= width) ++lo;
    best = std::max<uint64_t>(best, hi - lo + 1);
  }
  return best;
}

// Nearest rank: the smallest value with at least share q of the values at or below it.
uint64_t quantile(std::vector<uint64_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  const size_t i = std::min(v.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

}  // namespace

ArrivalFigures arrival_figures(const std::vector<uint64_t>& stamps, double reference_pps) {
  ArrivalFigures f;
  if (stamps.empty()) return f;
  std::vector<uint64_t> gaps, dev;
  const double ideal = reference_pps > 0 ? 1e9 / reference_pps : 0;
  for (size_t i = 1; i < stamps.size(); ++i) {
    const uint64_t g = stamps[i] - stamps[i - 1];
    gaps.push_back(g);
    dev.push_back(static_cast<uint64_t>(std::fabs(static_cast<double>(g) - ideal)));
  }
  f.iat_p50_ns = quantile(gaps, 0.50);
  f.iat_p99_ns = quantile(gaps, 0.99);
  f.jitter_p99_ns = quantile(dev, 0.99);
  f.peak_100us = peak_in(stamps, 100'000);
  f.peak_1ms = peak_in(stamps, 1'000'000);
  f.peak_10ms = peak_in(stamps, 10'000'000);
  if (reference_pps > 0)
    f.burst_factor = static_cast<double>(f.peak_10ms) / (reference_pps * 0.010);
  return f;
}

}  // namespace dripgate::lab
