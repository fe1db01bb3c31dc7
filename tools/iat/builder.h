// Makes a Profile from either source: timestamps one by one (pcap), or the probe's counters
// at the end of a live run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ebpf/iat_counters.h"
#include "tools/iat/profile.h"

namespace dripgate::iat {

// Feeds timestamps one by one (pcap mode): exact sums plus the probe's bucketing and windows.
class ProfileBuilder {
 public:
  explicit ProfileBuilder(std::vector<uint64_t> windows_ns);
  void add(uint64_t ts_ns, uint64_t bytes);
  // The resolution the source stamped with (1000 for a microsecond pcap); only reported.
  void set_ts_resolution_ns(uint64_t ns) { p_.ts_resolution_ns = ns; }
  // Also fits every gap to this ideal interval (IntervalFit); 0 = no fit. Keeps one deviation
  // per gap until finish(): exact percentiles, 8 bytes a packet.
  void set_interval_ns(uint64_t ns) { interval_ns_ = ns; }
  // Closes the open windows and computes the figures; the builder is spent afterwards.
  Profile finish(std::string source, std::string mode);

 private:
  struct WindowState {
    uint64_t start = 0;
    uint64_t count = 0;
  };
  void add_gap(uint64_t d);

  Profile p_;
  std::vector<WindowState> state_;
  uint64_t gaps_ = 0;  // gaps filed so far (out-of-order stamps are not gaps)
  uint64_t prev_ = 0;
  uint64_t interval_ns_ = 0;
  std::vector<uint64_t> deviations_;
};

// Live mode: the probe's maps at the end of a run. capture_ns is how long it was attached.
Profile profile_from_counters(const ebpf::Counters& counters, uint64_t capture_ns,
                              std::string source);

}  // namespace dripgate::iat
