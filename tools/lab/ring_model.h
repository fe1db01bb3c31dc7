// The inference cluster's NIC, modelled on the kernel's receive timestamps: a ring of
// `descriptors` slots that the host drains at `drain_pps`; a packet that finds it full is
// dropped. Run on the arrival stamps rather than on when a user-space reader gets around to
// them, so the verdict does not depend on how this process is scheduled.
#pragma once

#include <cstdint>
#include <vector>

namespace dripgate::lab {

class RingModel {
 public:
  RingModel(uint32_t descriptors, double drain_pps) : size_(descriptors), drain_pps_(drain_pps) {}

  // One arrival at `t_ns` (non-decreasing); true when the ring had a free descriptor.
  bool arrive(uint64_t t_ns) {
    if (seen_) {
      const double drained = static_cast<double>(t_ns - last_ns_) * drain_pps_ / 1e9;
      fill_ = fill_ > drained ? fill_ - drained : 0.0;
    }
    seen_ = true;
    last_ns_ = t_ns;
    if (fill_ + 1.0 > size_) return false;
    fill_ += 1.0;
    if (fill_ > max_fill_) max_fill_ = fill_;
    return true;
  }
  double max_fill() const { return max_fill_; }

 private:
  double size_;
  double drain_pps_;
  double fill_ = 0;
  double max_fill_ = 0;
  uint64_t last_ns_ = 0;
  bool seen_ = false;
};

// Figures of an arrival sequence (sorted stamps, ns).
struct ArrivalFigures {
  uint64_t iat_p50_ns = 0, iat_p99_ns = 0;
  uint64_t jitter_p99_ns = 0;  // p99 of |inter-arrival - 1/reference rate|
  uint64_t peak_100us = 0, peak_1ms = 0, peak_10ms = 0;  // most arrivals in any sliding window
  double burst_factor = 0;  // peak_10ms / (reference rate x 10 ms): 1.0 = never above it
};
ArrivalFigures arrival_figures(const std::vector<uint64_t>& stamps, double reference_pps);

}  // namespace dripgate::lab
