#include "dataplane/classify.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace dripgate::dataplane {

namespace {

inline uint64_t load_be64(const uint8_t* p) noexcept {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

inline bool prefix_match(const uint64_t addr[2], const uint64_t want[2],
                         const uint64_t mask[2]) noexcept {
  return (((addr[0] ^ want[0]) & mask[0]) | ((addr[1] ^ want[1]) & mask[1])) == 0;
}

}  // namespace

std::optional<Prefix> parse_prefix(std::string_view text) {
  Prefix p;
  std::string_view addr_text = text;
  const size_t slash = text.find('/');
  unsigned parsed_len = 0;
  const bool has_len = slash != std::string_view::npos;
  if (has_len) {
    addr_text = text.substr(0, slash);
    const std::string_view len_text = text.substr(slash + 1);
    if (len_text.empty() || len_text.size() > 3) return std::nullopt;
    const char* end = len_text.data() + len_text.size();
    const auto [ptr, ec] = std::from_chars(len_text.data(), end, parsed_len);
    if (ec != std::errc() || ptr != end) return std::nullopt;
  }
  uint8_t bytes[16];
  if (!parse_address(addr_text, &p.l3, bytes)) return std::nullopt;
  const int max_len = p.l3 == L3::kIpv4 ? 32 : 128;
  if (has_len && parsed_len > static_cast<unsigned>(max_len)) return std::nullopt;
  const int len = has_len ? static_cast<int>(parsed_len) : max_len;
  p.len = static_cast<uint8_t>(len);
  for (int half = 0; half < 2; ++half) {
    const int bits = std::min(std::max(len - 64 * half, 0), 64);
    p.mask[half] = bits == 0 ? 0 : ~uint64_t{0} << (64 - bits);
    p.addr[half] = load_be64(bytes + 8 * half) & p.mask[half];
  }
  return p;
}

ClassifierCompileResult Classifier::compile(const std::vector<config::Rule>& rules,
                                            const std::vector<config::Class>& classes) {
  ClassifierCompileResult result;
  Classifier c;
  c.rules_.reserve(rules.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    const config::Rule& r = rules[i];
    const std::string where = "classify[" + std::to_string(i) + "]";
    Compiled out;
    std::memset(&out, 0, sizeof(out));

    size_t k = 0;
    while (k < classes.size() && classes[k].name != r.klass) ++k;
    if (k == classes.size()) {
      result.error = where + ".class: unknown class '" + r.klass + "'";
      return result;
    }
    if (k > UINT16_MAX) {
      result.error = where + ".class: too many classes";
      return result;
    }
    out.klass = static_cast<uint16_t>(k);

    if (r.src) {
      const auto p = parse_prefix(*r.src);
      if (!p) {
        result.error = where + ".src: invalid CIDR '" + *r.src + "'";
        return result;
      }
      out.match |= kSrc;
      out.src_l3 = p->l3;
      std::memcpy(out.src, p->addr, sizeof(out.src));
      std::memcpy(out.src_mask, p->mask, sizeof(out.src_mask));
    }
    if (r.dst) {
      const auto p = parse_prefix(*r.dst);
      if (!p) {
        result.error = where + ".dst: invalid CIDR '" + *r.dst + "'";
        return result;
      }
      out.match |= kDst;
      out.dst_l3 = p->l3;
      std::memcpy(out.dst, p->addr, sizeof(out.dst));
      std::memcpy(out.dst_mask, p->mask, sizeof(out.dst_mask));
    }
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
  }
  result.classifier = std::move(c);
  return result;
}

int Classifier::classify(const ParsedPacket& p) const noexcept {
  // Addresses are loaded once per packet, not once per rule.
  const uint64_t src[2] = {load_be64(p.tuple.src), load_be64(p.tuple.src + 8)};
  const uint64_t dst[2] = {load_be64(p.tuple.dst), load_be64(p.tuple.dst + 8)};
  for (const Compiled& r : rules_) {
    if ((r.match & kSrc) && (r.src_l3 != p.tuple.l3 || !prefix_match(src, r.src, r.src_mask))) {
      continue;
    }
    if ((r.match & kDst) && (r.dst_l3 != p.tuple.l3 || !prefix_match(dst, r.dst, r.dst_mask))) {
      continue;
    }
    if ((r.match & kVlan) && (p.vlan_count == 0 || p.vlan != r.vlan)) continue;
    if ((r.match & kDscp) && p.dscp != r.dscp) continue;
    return r.klass;
  }
  return kNoMatch;
}

}  // namespace dripgate::dataplane
