#include "dataplane/parse.h"

#include <arpa/inet.h>

#include <cstring>

#include "dataplane/parse_frame.h"

namespace dripgate::dataplane {

namespace {

// A frame in one buffer: every byte in place.
struct ContiguousFrame {
  const uint8_t* data;
  uint32_t size;
  uint32_t len() const noexcept { return size; }
  const uint8_t* at(uint32_t off, uint32_t, uint8_t*) const noexcept { return data + off; }
};

}  // namespace

const char* to_string(ParseStatus s) noexcept {
  switch (s) {
    case ParseStatus::kOk:
      return "ok";
    case ParseStatus::kNotIp:
      return "not-ip";
    case ParseStatus::kTruncatedL2:
      return "truncated-l2";
    case ParseStatus::kTruncatedVlan:
      return "truncated-vlan";
    case ParseStatus::kTooManyVlans:
      return "too-many-vlans";
    case ParseStatus::kTruncatedIpv4:
      return "truncated-ipv4";
    case ParseStatus::kBadIpVersion:
      return "bad-ip-version";
    case ParseStatus::kBadIhl:
      return "bad-ihl";
    case ParseStatus::kBadIpv4Len:
      return "bad-ipv4-len";
    case ParseStatus::kTruncatedIpv6:
      return "truncated-ipv6";
    case ParseStatus::kBadIpv6ExtChain:
      return "bad-ipv6-ext-chain";
    case ParseStatus::kTruncatedL4:
      return "truncated-l4";
    case ParseStatus::kBadTcpOffset:
      return "bad-tcp-offset";
    case ParseStatus::kCount:
      break;
  }
  return "unknown";
}

ParseStatus parse(const uint8_t* data, uint32_t len, ParsedPacket* out) noexcept {
  return parse_detail::parse_frame(ContiguousFrame{data, len}, out);
}

bool parse_address(std::string_view text, L3* l3, uint8_t addr[16]) {
  char buf[INET6_ADDRSTRLEN + 1];
  if (text.empty() || text.size() >= sizeof(buf)) return false;
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  std::memset(addr, 0, 16);
  if (inet_pton(AF_INET, buf, addr) == 1) {
    *l3 = L3::kIpv4;
    return true;
  }
  if (inet_pton(AF_INET6, buf, addr) == 1) {
    *l3 = L3::kIpv6;
    return true;
  }
  std::memset(addr, 0, 16);
  return false;
}

std::optional<FiveTuple> make_tuple(std::string_view src, uint16_t sport, std::string_view dst,
                                    uint16_t dport, uint8_t proto) {
  FiveTuple t;
  std::memset(&t, 0, sizeof(t));
  L3 src_l3 = L3::kNone;
  L3 dst_l3 = L3::kNone;
  if (!parse_address(src, &src_l3, t.src) || !parse_address(dst, &dst_l3, t.dst)) {
    return std::nullopt;
  }
  if (src_l3 != dst_l3) return std::nullopt;
  t.l3 = src_l3;
  t.sport = sport;
  t.dport = dport;
  t.proto = proto;
  return t;
}

std::string format_tuple(const FiveTuple& t) {
  char src[INET6_ADDRSTRLEN] = "?";
  char dst[INET6_ADDRSTRLEN] = "?";
  const int af = t.l3 == L3::kIpv6 ? AF_INET6 : AF_INET;
  inet_ntop(af, t.src, src, sizeof(src));
  inet_ntop(af, t.dst, dst, sizeof(dst));
  const bool v6 = t.l3 == L3::kIpv6;
  std::string s;
  s += v6 ? "[" : "";
  s += src;
  s += v6 ? "]:" : ":";
  s += std::to_string(t.sport);
  s += v6 ? " -> [" : " -> ";
  s += dst;
  s += v6 ? "]:" : ":";
  s += std::to_string(t.dport);
  s += " proto ";
  s += std::to_string(t.proto);
  return s;
}

}  // namespace dripgate::dataplane
