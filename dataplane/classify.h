// Static classification rules (YAML `dataplane.classify`), compiled once at start into a flat
// array the fast path scans in order; the first matching rule wins. Free of DPDK.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/address.h"
#include "config/config.h"
#include "dataplane/parse.h"

namespace dripgate::dataplane {

// An address prefix in the tuple's 16-byte form, as two big-endian 64-bit halves.
struct Prefix {
  L3 l3 = L3::kNone;
  uint8_t len = 0;  // prefix length in bits
  uint64_t addr[2] = {0, 0};
  uint64_t mask[2] = {0, 0};
};

// A parsed network (common::parse_cidr) in the classifier's form.
Prefix to_prefix(const common::Cidr& net);

// common::parse_cidr with host bits beyond the prefix cleared (as iptables does), so
// "10.1.2.3/16" is 10.1.0.0/16; a bare address is a host prefix. nullopt on any syntax error or
// out-of-range length.
std::optional<Prefix> parse_prefix(std::string_view text);

struct ClassifierCompileResult;

class Classifier {
 public:
  static constexpr int kNoMatch = -1;

  // Class indexes are positions in `classes` (the config's YAML order). Errors: a rule naming an
  // unknown class, a bad CIDR, vlan > 4095, dscp > 63.
  static ClassifierCompileResult compile(const std::vector<config::Rule>& rules,
                                         const std::vector<config::Class>& classes);

  Classifier() = default;

  // Index of the class of the first rule matching `p`, or kNoMatch. `p` must have status kOk.
  int classify(const ParsedPacket& p) const noexcept;
  // classify() for an untagged IPv4 packet (a frame parse_ipv4_fast took), addresses as on the
  // wire: the rules that can match such a packet, in their order, as 32-bit masks.
  int classify_ipv4(uint32_t src, uint32_t dst, uint8_t dscp) const noexcept;

  size_t size() const noexcept { return rules_.size(); }

 private:
  enum : uint8_t { kSrc = 1, kDst = 2, kVlan = 4, kDscp = 8 };
  struct Compiled {
    Prefix src, dst;
    uint8_t match;  // kSrc | kDst | ...
    uint8_t dscp;
    uint16_t vlan;
    uint16_t cls;
  };
  struct CompiledIpv4 {
    uint32_t src, src_mask;  // host byte order; mask 0: any
    uint32_t dst, dst_mask;
    uint8_t dscp, dscp_mask;  // mask 0: any
    uint16_t cls;
  };
  std::vector<Compiled> rules_;
  std::vector<CompiledIpv4> rules_ipv4_;
};

struct ClassifierCompileResult {
  std::optional<Classifier> classifier;  // set only when error is empty
  std::string error;                     // "classify[1].src: invalid CIDR 'x'"
};

}  // namespace dripgate::dataplane
