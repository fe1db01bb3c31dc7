#include "tools/iat/builder.h"

#include <algorithm>
#include <cmath>

namespace dripgate::iat {

ProfileBuilder::ProfileBuilder(std::vector<uint64_t> windows_ns) {
  for (uint64_t w : windows_ns) {
    WindowProfile wp;
    wp.width_ns = w;
    p_.windows.push_back(wp);
  }
  state_.resize(windows_ns.size());
  p_.exact = ExactStats{};
}

void ProfileBuilder::add(uint64_t ts_ns, uint64_t bytes) {
  uint64_t t = ts_ns;
  if (p_.packets == 0) {
    p_.first_ns = t;
  } else {
    if (t < prev_) {
      // A negative gap is no inter-arrival: counting it as 0 ns would invent a sub-ns mode (a
      // p50 above the max). It is counted apart and the next gap runs from the latest stamp.
      ++p_.out_of_order;
      t = prev_;  // keeps the windows and the span monotonic
    } else {
      add_gap(t - prev_);
    }
  }
  ++p_.packets;
  p_.bytes += bytes;
  p_.last_ns = t;
  prev_ = t;
  // Windows tile the time axis from 0 (start = t - t % width), as the probe's do, so a live
  // profile and a pcap of the same traffic count the same windows.
  for (size_t i = 0; i < state_.size(); ++i) {
    auto& s = state_[i];
    auto& w = p_.windows[i];
    uint64_t start = t - t % w.width_ns;
    if (s.count == 0 || start > s.start) {
      if (s.count) {
        ++w.count_hist[iat_count_bucket(s.count)];
        ++w.windows;
      }
      s.start = start;
      s.count = 0;
    }
    ++s.count;
    w.max_count = std::max(w.max_count, s.count);
  }
}

void ProfileBuilder::add_gap(uint64_t d) {
  ++p_.hist[iat_bucket(d)];
  auto& e = *p_.exact;
  if (gaps_ == 0 || d < e.min_ns) e.min_ns = d;
  e.max_ns = std::max(e.max_ns, d);
  e.sum += static_cast<long double>(d);
  e.sum_sq += static_cast<long double>(d) * static_cast<long double>(d);
  ++gaps_;
  if (interval_ns_) deviations_.push_back(d > interval_ns_ ? d - interval_ns_ : interval_ns_ - d);
}

Profile ProfileBuilder::finish(std::string source, std::string mode) {
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].count) {
      ++p_.windows[i].count_hist[iat_count_bucket(state_[i].count)];
      ++p_.windows[i].windows;
      state_[i].count = 0;
    }
  }
  p_.source = std::move(source);
  p_.mode = std::move(mode);
  p_.finish();
  if (interval_ns_) {
    IntervalFit f;
    f.interval_ns = interval_ns_;
    f.gaps = deviations_.size();
    std::sort(deviations_.begin(), deviations_.end());
    for (size_t i = 0; i < std::size(kIntervalTolerances); ++i)
      f.within[i] = static_cast<uint64_t>(
          std::upper_bound(deviations_.begin(), deviations_.end(), kIntervalTolerances[i]) -
          deviations_.begin());
    auto rank = [&](double q) {
      if (deviations_.empty()) return uint64_t{0};
      auto r = static_cast<size_t>(std::ceil(q * static_cast<double>(deviations_.size())));
      return deviations_[std::clamp<size_t>(r, 1, deviations_.size()) - 1];
    };
    f.p50_ns = rank(0.5);
    f.p99_ns = rank(0.99);
    f.p999_ns = rank(0.999);
    f.max_ns = deviations_.empty() ? 0 : deviations_.back();
    f.rate_offset =
        p_.mean_rate_pps > 0 ? p_.mean_rate_pps * static_cast<double>(interval_ns_) / 1e9 - 1 : 0;
    p_.interval = f;
    deviations_ = {};
  }
  return std::move(p_);
}

Profile profile_from_counters(const ebpf::Counters& counters, uint64_t capture_ns,
                              std::string source) {
  Profile p;
  p.source = std::move(source);
  p.mode = "live";
  p.packets = counters.totals.packets;
  p.bytes = counters.totals.bytes;
  p.first_ns = counters.totals.first_ns;
  p.last_ns = counters.totals.last_ns;
  p.filtered_out = counters.totals.filtered_out;
  p.capture_ns = capture_ns;
  p.hist = counters.hist;
  for (unsigned i = 0; i < IAT_WINDOWS; ++i) {
    const auto& rw = counters.windows[i];
    if (rw.width_ns == 0) continue;
    WindowProfile w;
    w.width_ns = rw.width_ns;
    w.max_count = std::max(rw.max_count, rw.cur_count);
    w.windows = rw.windows;
    w.count_hist = counters.count_hist[i];
    // The probe files a window when the next one opens; the last one is still open.
    if (rw.cur_count) {
      ++w.count_hist[iat_count_bucket(rw.cur_count)];
      ++w.windows;
    }
    p.windows.push_back(w);
  }
  p.finish();
  return p;
}

}  // namespace dripgate::iat
