#include "tools/iat/profile.h"

#include <algorithm>
#include <cmath>

namespace dripgate::iat {

void Profile::finish() {
  intervals = hist_total(hist);
  duration_s = last_ns > first_ns ? static_cast<double>(last_ns - first_ns) / 1e9 : 0.0;
  mean_rate_pps = duration_s > 0 ? static_cast<double>(intervals) / duration_s : 0.0;
  percentiles.clear();
  for (double q : kQuantiles) percentiles.push_back(percentile_from_hist(hist, q));
  mean_iat_ns = 0;
  cv = 0;
  max_iat_ns = 0;
  if (intervals == 0) {
    cv_exact = exact.has_value();
    max_exact = exact.has_value();
    return;
  }
  if (exact) {
    long double n = static_cast<long double>(intervals);
    long double mean = exact->sum / n;
    long double var = exact->sum_sq / n - mean * mean;
    if (var < 0) var = 0;  // rounding
    mean_iat_ns = static_cast<double>(mean);
    cv = mean > 0 ? static_cast<double>(std::sqrt(var) / mean) : 0.0;
    cv_exact = true;
    max_iat_ns = static_cast<double>(exact->max_ns);
    max_exact = true;
    // Interpolating inside a bucket can land above the exact max (gaps of 0 ns all fall in
    // [0, 1) and interpolate to 0.5 ns); no percentile exceeds the max.
    for (auto& pc : percentiles) pc.value_ns = std::min(pc.value_ns, max_iat_ns);
  } else {
    // The sum of all intervals is last - first exactly; only the spread needs the buckets.
    double n = static_cast<double>(intervals);
    double mean = duration_s * 1e9 / n;
    double var = 0;
    for (unsigned b = 0; b < IAT_BUCKETS; ++b) {
      if (hist[b] == 0) continue;
      double d = bucket_mid(b) - mean;
      var += static_cast<double>(hist[b]) * d * d;
    }
    var /= n;
    mean_iat_ns = mean;
    cv = mean > 0 ? std::sqrt(var) / mean : 0.0;
    cv_exact = false;
    for (unsigned b = IAT_BUCKETS; b-- > 0;) {
      if (hist[b]) {
        max_iat_ns = static_cast<double>(bucket_high(b));
        break;
      }
    }
    max_exact = false;
  }
  for (auto& w : windows) {
    double width_s = static_cast<double>(w.width_ns) / 1e9;
    w.peak_rate_pps = static_cast<double>(w.max_count) / width_s;
    w.burst_factor = mean_rate_pps > 0 ? w.peak_rate_pps / mean_rate_pps : 0.0;
  }
}

}  // namespace dripgate::iat
