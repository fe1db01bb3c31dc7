#include "dataplane/classify.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace dripgate::dataplane {

namespace {

inline uint64_t load_be64(const uint8_t* p) noexcept {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
  return v;
}

inline bool prefix_match(const uint64_t addr[2], const Prefix& want) noexcept {
  const uint64_t diff0 = (addr[0] ^ want.addr[0]) & want.mask[0];
  const uint64_t diff1 = (addr[1] ^ want.addr[1]) & want.mask[1];
  return (diff0 | diff1) == 0;
}

}  // namespace

Prefix to_prefix(const common::Cidr& net) {
  Prefix p;
  p.l3 = net.v6 ? L3::kIpv6 : L3::kIpv4;
  p.len = net.prefix;
  for (int half = 0; half < 2; ++half) {
    const int bits = std::min(std::max(int{net.prefix} - 64 * half, 0), 64);
    p.mask[half] = bits == 0 ? 0 : ~uint64_t{0} << (64 - bits);
    p.addr[half] = load_be64(net.addr.data() + 8 * half) & p.mask[half];
  }
  return p;
}

std::optional<Prefix> parse_prefix(std::string_view text) {
  const auto net = common::parse_cidr(text, nullptr, common::HostBits::kClear);
  if (!net) return std::nullopt;
  return to_prefix(*net);
}

ClassifierCompileResult Classifier::compile(const std::vector<config::Rule>& rules,
                                            const std::vector<config::Class>& classes) {
  ClassifierCompileResult result;
  Classifier c;
  c.rules_.reserve(rules.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    const config::Rule& r = rules[i];
    const std::string where = "classify[" + std::to_string(i) + "]";
    Compiled out{};

    size_t cls = 0;
    while (cls < classes.size() && classes[cls].name != r.cls) ++cls;
    if (cls == classes.size()) {
      result.error = where + ".class: unknown class '" + r.cls + "'";
      return result;
    }
    if (cls > UINT16_MAX) {
      result.error = where + ".class: too many classes";
      return result;
    }
    out.cls = static_cast<uint16_t>(cls);

    // The loader has parsed src/dst already; rules built in code carry only the text.
    auto prefix = [&](const char* field, const std::optional<std::string>& text,
                      const std::optional<common::Cidr>& net, uint8_t bit, Prefix* to) {
      if (!text) return true;
      const auto p = net ? to_prefix(*net) : parse_prefix(*text);
      if (!p) {
        result.error = where + "." + field + ": invalid CIDR '" + *text + "'";
        return false;
      }
      out.match |= bit;
      *to = *p;
      return true;
    };
    if (!prefix("src", r.src, r.src_net, kSrc, &out.src) ||
        !prefix("dst", r.dst, r.dst_net, kDst, &out.dst))
      return result;
    if (r.vlan) {
      if (*r.vlan > 4095) {
        result.error = where + ".vlan: " + std::to_string(*r.vlan) + " is not in 0..4095";
        return result;
      }
      out.match |= kVlan;
      out.vlan = *r.vlan;
    }
    if (r.dscp) {
      if (*r.dscp > 63) {
        result.error = where + ".dscp: " + std::to_string(*r.dscp) + " is not in 0..63";
        return result;
      }
      out.match |= kDscp;
      out.dscp = *r.dscp;
    }
    c.rules_.push_back(out);
    // A VLAN rule or an IPv6 prefix never matches an untagged IPv4 packet.
    const bool v4_src = !(out.match & kSrc) || out.src.l3 == L3::kIpv4;
    const bool v4_dst = !(out.match & kDst) || out.dst.l3 == L3::kIpv4;
    if (!(out.match & kVlan) && v4_src && v4_dst) {
      c.rules_ipv4_.push_back(CompiledIpv4{static_cast<uint32_t>(out.src.addr[0] >> 32),
                                           static_cast<uint32_t>(out.src.mask[0] >> 32),
                                           static_cast<uint32_t>(out.dst.addr[0] >> 32),
                                           static_cast<uint32_t>(out.dst.mask[0] >> 32), out.dscp,
                                           static_cast<uint8_t>(out.match & kDscp ? 0xFF : 0),
                                           out.cls});
    }
  }
  result.classifier = std::move(c);
  return result;
}

int Classifier::classify(const ParsedPacket& p) const noexcept {
  // Addresses are loaded once per packet, not once per rule.
  const uint64_t src[2] = {load_be64(p.tuple.src), load_be64(p.tuple.src + 8)};
  const uint64_t dst[2] = {load_be64(p.tuple.dst), load_be64(p.tuple.dst + 8)};
  for (const Compiled& r : rules_) {
    if ((r.match & kSrc) && (r.src.l3 != p.tuple.l3 || !prefix_match(src, r.src))) continue;
    if ((r.match & kDst) && (r.dst.l3 != p.tuple.l3 || !prefix_match(dst, r.dst))) continue;
    if ((r.match & kVlan) && (p.vlan_count == 0 || p.vlan != r.vlan)) continue;
    if ((r.match & kDscp) && p.dscp != r.dscp) continue;
    return r.cls;
  }
  return kNoMatch;
}

int Classifier::classify_ipv4(uint32_t src, uint32_t dst, uint8_t dscp) const noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    src = __builtin_bswap32(src);
    dst = __builtin_bswap32(dst);
  }
  for (const CompiledIpv4& r : rules_ipv4_) {
    if ((((src ^ r.src) & r.src_mask) | ((dst ^ r.dst) & r.dst_mask) |
         ((dscp ^ r.dscp) & r.dscp_mask)) == 0)
      return r.cls;
  }
  return kNoMatch;
}

}  // namespace dripgate::dataplane
