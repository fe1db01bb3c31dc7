// What the probe counts: the packet filter of the command line (prefixes, port ranges, protocol)
// and its rodata layout for the BPF program (iat_filter in iat.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ebpf/iat.h"

namespace dripgate::ebpf {

// An address prefix, IPv4 or IPv6: "10.0.0.0/8", "fd00::/64", or a plain address (full length).
struct Prefix {
  int family = 4;  // 4 or 6
  std::array<uint8_t, 16> addr{};
  unsigned len = 0;

  // Throws std::invalid_argument with the offending text.
  static Prefix parse(std::string_view text);
  std::string str() const;
};

struct PortRange {
  uint16_t lo = 0;
  uint16_t hi = 65535;

  // "8080" or "8000-8100"; throws std::invalid_argument.
  static PortRange parse(std::string_view text);
};

// Unset criteria match everything; non-IP frames (ARP, LLDP...) never match and are counted in
// iat_totals::filtered_out. Ports require TCP/UDP/SCTP.
struct Filter {
  std::optional<Prefix> src;
  std::optional<Prefix> dst;
  std::optional<PortRange> src_port;
  std::optional<PortRange> dst_port;
  std::optional<uint8_t> protocol;  // IPPROTO_*

  // The rodata layout shared with the BPF program.
  iat_filter to_bpf() const;
};

}  // namespace dripgate::ebpf
