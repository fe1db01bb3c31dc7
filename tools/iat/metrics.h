// dripgate-iat `serve`'s figures as Prometheus text: the probe's counters (ebpf::Counters) as
// they stand at the scrape, and the burst windows over a sliding period (BurstTracker). No libbpf:
// the loop that reads the probe and serves the text is tools/iat/serve.cc.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "ebpf/iat_counters.h"

namespace dripgate::iat {

// Each burst window's peak (most packets in one window) against the mean per window, over the
// last `period`: the serve loop ticks it (every second) with the packet total and the peaks the
// probe saw since the previous tick (IatProbe::take_window_peaks). A tick older than the period
// drops out, so a burst shows for one period after it and then goes.
class BurstTracker {
 public:
  BurstTracker(std::vector<uint64_t> widths_ns, uint64_t period_ns);

  void tick(uint64_t now_ns, uint64_t packets_total, const std::vector<uint64_t>& peaks);

  struct Window {
    uint64_t width_ns = 0;
    uint64_t peak = 0;        // most packets in one window during the period
    double burst_factor = 0;  // peak / (packets in the period * width / period); 0: no packet
  };
  std::vector<Window> windows() const;
  const std::vector<uint64_t>& widths() const { return widths_; }

 private:
  struct Tick {
    uint64_t at_ns, packets;
    std::vector<uint64_t> peaks;
  };
  std::vector<uint64_t> widths_;
  uint64_t period_ns_;
  std::deque<Tick> ticks_;  // the first one is the period's start
};

// The log-linear bucket bounds of dripgate_iat_interarrival_seconds: the probe's bucket edges, 4
// per power of two from 1.024 us to 34 s (every other edge of ebpf/iat.h, so each count is
// exact), in ns.
const std::vector<uint64_t>& interarrival_bounds_ns();

std::string render_iat_metrics(const ebpf::Counters& c, const BurstTracker& bursts,
                               const std::string& iface);

}  // namespace dripgate::iat
