// The maths of the probe's log-linear histograms (layout in ebpf/iat.h): bucket bounds,
// percentiles, and the merge to powers of two the reports draw.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ebpf/iat.h"

namespace dripgate::iat {

using Histogram = std::array<uint64_t, IAT_BUCKETS>;             // inter-arrival gaps, ns
using CountHistogram = std::array<uint64_t, IAT_COUNT_BUCKETS>;  // packets per window

// The quantiles every profile reports.
inline constexpr double kQuantiles[] = {0.5, 0.9, 0.99, 0.999};

struct Percentile {
  double q = 0;              // 0.5, 0.9, 0.99, 0.999
  double value_ns = 0;       // interpolated linearly inside its bucket
  double resolution_ns = 0;  // width of that bucket
};

// Bucket b's bounds in ns: [bucket_low(b), bucket_high(b)).
uint64_t bucket_low(unsigned b);
uint64_t bucket_high(unsigned b);
double bucket_mid(unsigned b);
// Bounds of the count-histogram bucket b: [low, high).
uint64_t count_bucket_low(unsigned b);
uint64_t count_bucket_high(unsigned b);

uint64_t hist_total(const Histogram& hist);
// Percentile q in (0, 1] from the histogram, interpolated inside the bucket holding rank q*N.
Percentile percentile_from_hist(const Histogram& hist, double q);
// "p50", "p99.9".
std::string quantile_name(double q);

// One row of a histogram merged to powers of two, labelled "[low, high)".
struct MergedRow {
  std::string label;
  uint64_t count = 0;
};
// Only the rows between the first and the last non-empty one, as bpftrace prints.
std::vector<MergedRow> merged_iat_rows(const Histogram& hist);
std::vector<MergedRow> merged_count_rows(const CountHistogram& hist);

}  // namespace dripgate::iat
