#include "dataplane/parse.h"

#include <arpa/inet.h>

#include <cstring>

namespace dripgate::dataplane {

namespace {

constexpr uint16_t kEtherIpv4 = 0x0800;
constexpr uint16_t kEtherIpv6 = 0x86DD;
constexpr uint16_t kEtherVlan = 0x8100;
constexpr uint16_t kEtherQinq = 0x88A8;
constexpr uint32_t kEtherHeader = 14;
constexpr uint32_t kVlanTag = 4;
constexpr uint8_t kMaxVlans = 2;

constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;
constexpr uint8_t kIpv6HopByHop = 0;
constexpr uint8_t kIpv6Routing = 43;
constexpr uint8_t kIpv6Fragment = 44;
constexpr uint8_t kIpv6Ah = 51;
constexpr uint8_t kIpv6DestOpts = 60;
// Real chains carry 2-3 headers; the bound keeps a crafted chain from costing more than a few
// cache lines of work.
constexpr int kMaxIpv6ExtHeaders = 8;

inline uint16_t load16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>((static_cast<uint16_t>(p[0]) << 8) | p[1]);
}

inline ParseStatus finish(ParsedPacket* out, ParseStatus s) noexcept {
  out->status = s;
  return s;
}

// `p` points at the L4 header, `len` is what the IP header says is left (already checked to lie
// inside the buffer).
ParseStatus parse_l4(const uint8_t* frame, const uint8_t* p, uint32_t len,
                     ParsedPacket* out) noexcept {
  const uint8_t proto = out->tuple.proto;
  if (proto != kProtoTcp && proto != kProtoUdp) return finish(out, ParseStatus::kOk);
  out->l4_offset = static_cast<uint16_t>(p - frame);
  if (proto == kProtoTcp) {
    if (len < 20) return finish(out, ParseStatus::kTruncatedL4);
    const uint32_t data_offset = (p[12] >> 4) * 4u;
    if (data_offset < 20) return finish(out, ParseStatus::kBadTcpOffset);
    if (data_offset > len) return finish(out, ParseStatus::kTruncatedL4);
  } else if (len < 8) {
    return finish(out, ParseStatus::kTruncatedL4);
  }
  out->tuple.sport = load16(p);
  out->tuple.dport = load16(p + 2);
  return finish(out, ParseStatus::kOk);
}

ParseStatus parse_ipv4(const uint8_t* frame, uint32_t off, uint32_t len,
                       ParsedPacket* out) noexcept {
  const uint32_t avail = len - off;
  if (avail < 20) return finish(out, ParseStatus::kTruncatedIpv4);
  const uint8_t* ip = frame + off;
  if ((ip[0] >> 4) != 4) return finish(out, ParseStatus::kBadIpVersion);
  const uint32_t ihl = (ip[0] & 0x0Fu) * 4u;
  if (ihl < 20) return finish(out, ParseStatus::kBadIhl);
  const uint32_t total = load16(ip + 2);
  if (total < ihl) return finish(out, ParseStatus::kBadIpv4Len);
  // Ethernet may pad short packets, so the buffer can be longer than `total`, never shorter.
  if (total > avail) return finish(out, ParseStatus::kTruncatedIpv4);

  out->tuple.l3 = L3::kIpv4;
  out->dscp = ip[1] >> 2;
  out->tuple.proto = ip[9];
  std::memcpy(out->tuple.src, ip + 12, 4);
  std::memcpy(out->tuple.dst, ip + 16, 4);

  const uint16_t frag = load16(ip + 6);
  const bool more_fragments = (frag & 0x2000) != 0;
  const uint16_t frag_offset = frag & 0x1FFF;
  if (more_fragments || frag_offset != 0) out->fragment = true;
  // A non-first fragment starts mid-payload: what sits there is data, not a port pair.
  if (frag_offset != 0) return finish(out, ParseStatus::kOk);
  return parse_l4(frame, ip + ihl, total - ihl, out);
}

ParseStatus parse_ipv6(const uint8_t* frame, uint32_t off, uint32_t len,
                       ParsedPacket* out) noexcept {
  const uint32_t avail = len - off;
  if (avail < 40) return finish(out, ParseStatus::kTruncatedIpv6);
  const uint8_t* ip = frame + off;
  if ((ip[0] >> 4) != 6) return finish(out, ParseStatus::kBadIpVersion);
  const uint32_t payload = load16(ip + 4);
  if (payload > avail - 40) return finish(out, ParseStatus::kTruncatedIpv6);

  out->tuple.l3 = L3::kIpv6;
  out->dscp = static_cast<uint8_t>(((load16(ip) >> 4) & 0xFF) >> 2);
  std::memcpy(out->tuple.src, ip + 8, 16);
  std::memcpy(out->tuple.dst, ip + 24, 16);

  uint8_t next = ip[6];
  const uint8_t* p = ip + 40;
  uint32_t rem = payload;
  for (int n = 0;; ++n) {
    uint32_t hlen = 0;
    switch (next) {
      case kIpv6HopByHop:
        if (n != 0) return finish(out, ParseStatus::kBadIpv6ExtChain);
        [[fallthrough]];
      case kIpv6Routing:
      case kIpv6DestOpts:
        if (rem < 8) return finish(out, ParseStatus::kBadIpv6ExtChain);
        hlen = (p[1] + 1u) * 8u;
        break;
      case kIpv6Ah:
        if (rem < 8) return finish(out, ParseStatus::kBadIpv6ExtChain);
        hlen = (p[1] + 2u) * 4u;
        break;
      case kIpv6Fragment:
        if (rem < 8) return finish(out, ParseStatus::kBadIpv6ExtChain);
        hlen = 8;
        out->fragment = true;
        if ((load16(p + 2) >> 3) != 0) {
          // Non-first fragment: the header names the upper protocol but no L4 header follows.
          out->tuple.proto = p[0];
          return finish(out, ParseStatus::kOk);
        }
        break;
      default:  // upper layer (TCP, UDP, ICMPv6, ESP, no-next-header, unknown): the chain ends
        out->tuple.proto = next;
        return parse_l4(frame, p, rem, out);
    }
    if (n >= kMaxIpv6ExtHeaders || hlen > rem) {
      return finish(out, ParseStatus::kBadIpv6ExtChain);
    }
    next = p[0];
    p += hlen;
    rem -= hlen;
  }
}

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
  std::memset(out, 0, sizeof(*out));
  out->frame_len = len;
  if (len < kEtherHeader) return finish(out, ParseStatus::kTruncatedL2);

  uint16_t ether_type = load16(data + 12);
  uint32_t off = kEtherHeader;
  while (ether_type == kEtherVlan || ether_type == kEtherQinq) {
    if (out->vlan_count == kMaxVlans) return finish(out, ParseStatus::kTooManyVlans);
    if (len - off < kVlanTag) return finish(out, ParseStatus::kTruncatedVlan);
    if (out->vlan_count == 0) out->vlan = load16(data + off) & 0x0FFF;
    ether_type = load16(data + off + 2);
    off += kVlanTag;
    ++out->vlan_count;
  }

  out->l3_offset = static_cast<uint16_t>(off);
  switch (ether_type) {
    case kEtherIpv4:
      return parse_ipv4(data, off, len, out);
    case kEtherIpv6:
      return parse_ipv6(data, off, len, out);
    default:
      return finish(out, ParseStatus::kNotIp);
  }
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
