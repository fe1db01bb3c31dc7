// pcap mode of dripgate-iat: reads a pcap or pcapng file through libpcap with nanosecond
// timestamps and feeds the same bucketing as the eBPF probe, plus exact sums.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/iat/profile.h"
#include "tools/iat/units.h"

namespace dripgate::iat {

struct PcapOptions {
  std::string filter;  // a pcap-filter(7) expression; empty = every packet
  std::vector<uint64_t> windows_ns{std::begin(kDefaultWindows), std::end(kDefaultWindows)};
  uint64_t interval_ns = 0;  // > 0: also fit every gap to this ideal interval (IntervalFit)
};

// Errors (file missing, not a capture, filter that does not parse) throw PcapError with a
// message that names the file or the expression.
class PcapError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Profile profile_pcap(const std::string& path, const PcapOptions& options);

}  // namespace dripgate::iat
