// The general parser, over any storage of a frame: parse() (parse.cc) reads one contiguous
// buffer, parse_mbuf() (parse_mbuf.cc) a chain of mbufs whose headers may cross a segment
// boundary. Included only by those two files.
//
// A Frame has len(), the frame's length, and at(off, n, tmp): a pointer to its n contiguous
// bytes at off, in place or copied into tmp (kMaxRead bytes). The parser asks only for bytes
// it has checked lie inside the frame (off + n <= len()), and no more than a header's worth at
// a time, so a chain costs a copy only where a header straddles two segments.
#pragma once

#include <cstdint>
#include <cstring>

#include "dataplane/parse.h"

namespace dripgate::dataplane::parse_detail {

inline constexpr uint32_t kMaxRead = 40;  // the IPv6 header, the longest read at once

inline constexpr uint16_t kEtherIpv4 = 0x0800;
inline constexpr uint16_t kEtherIpv6 = 0x86DD;
inline constexpr uint16_t kEtherVlan = 0x8100;
inline constexpr uint16_t kEtherQinq = 0x88A8;
inline constexpr uint32_t kEtherHeader = 14;
inline constexpr uint32_t kVlanTag = 4;
inline constexpr uint8_t kMaxVlans = 2;

inline constexpr uint8_t kProtoTcp = 6;
inline constexpr uint8_t kProtoUdp = 17;
inline constexpr uint8_t kIpv6HopByHop = 0;
inline constexpr uint8_t kIpv6Routing = 43;
inline constexpr uint8_t kIpv6Fragment = 44;
inline constexpr uint8_t kIpv6Ah = 51;
inline constexpr uint8_t kIpv6DestOpts = 60;
// Real chains carry 2-3 headers; the bound keeps a crafted chain from costing more than a few
// cache lines of work.
inline constexpr int kMaxIpv6ExtHeaders = 8;

inline uint16_t load16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>((static_cast<uint16_t>(p[0]) << 8) | p[1]);
}

inline ParseStatus finish(ParsedPacket* out, ParseStatus s) noexcept {
  out->status = s;
  return s;
}

// The L4 header at `off`; `len` is what the IP header says is left (already checked to lie
// inside the frame).
template <class Frame>
ParseStatus parse_l4(const Frame& f, uint32_t off, uint32_t len, ParsedPacket* out) noexcept {
  const uint8_t proto = out->tuple.proto;
  if (proto != kProtoTcp && proto != kProtoUdp) return finish(out, ParseStatus::kOk);
  out->l4_offset = static_cast<uint16_t>(off);
  const uint32_t header = proto == kProtoTcp ? 20 : 8;
  if (len < header) return finish(out, ParseStatus::kTruncatedL4);
  uint8_t tmp[kMaxRead];
  const uint8_t* p = f.at(off, header, tmp);
  if (proto == kProtoTcp) {
    const uint32_t data_offset = (p[12] >> 4) * 4u;
    if (data_offset < 20) return finish(out, ParseStatus::kBadTcpOffset);
    if (data_offset > len) return finish(out, ParseStatus::kTruncatedL4);
  }
  out->tuple.sport = load16(p);
  out->tuple.dport = load16(p + 2);
  return finish(out, ParseStatus::kOk);
}

template <class Frame>
ParseStatus parse_ipv4(const Frame& f, uint32_t off, ParsedPacket* out) noexcept {
  const uint32_t avail = f.len() - off;
  if (avail < 20) return finish(out, ParseStatus::kTruncatedIpv4);
  uint8_t tmp[kMaxRead];
  const uint8_t* ip = f.at(off, 20, tmp);
  if ((ip[0] >> 4) != 4) return finish(out, ParseStatus::kBadIpVersion);
  const uint32_t ihl = (ip[0] & 0x0Fu) * 4u;
  if (ihl < 20) return finish(out, ParseStatus::kBadIhl);
  const uint32_t total = load16(ip + 2);
  if (total < ihl) return finish(out, ParseStatus::kBadIpv4Len);
  // Ethernet may pad short packets, so the frame can be longer than `total`, never shorter.
  if (total > avail) return finish(out, ParseStatus::kTruncatedIpv4);

  out->tuple.l3 = L3::kIpv4;
  out->dscp = ip[1] >> 2;
  out->ecn = ip[1] & 3;
  out->tuple.proto = ip[9];
  std::memcpy(out->tuple.src, ip + 12, 4);
  std::memcpy(out->tuple.dst, ip + 16, 4);

  const uint16_t frag = load16(ip + 6);
  const bool more_fragments = (frag & 0x2000) != 0;
  const uint16_t frag_offset = frag & 0x1FFF;
  if (more_fragments || frag_offset != 0) out->fragment = true;
  // A non-first fragment starts mid-payload: what sits there is data, not a port pair.
  if (frag_offset != 0) return finish(out, ParseStatus::kOk);
  return parse_l4(f, off + ihl, total - ihl, out);
}

template <class Frame>
ParseStatus parse_ipv6(const Frame& f, uint32_t off, ParsedPacket* out) noexcept {
  const uint32_t avail = f.len() - off;
  if (avail < 40) return finish(out, ParseStatus::kTruncatedIpv6);
  uint8_t tmp[kMaxRead];
  const uint8_t* ip = f.at(off, 40, tmp);
  if ((ip[0] >> 4) != 6) return finish(out, ParseStatus::kBadIpVersion);
  const uint32_t payload = load16(ip + 4);
  if (payload > avail - 40) return finish(out, ParseStatus::kTruncatedIpv6);

  out->tuple.l3 = L3::kIpv6;
  out->dscp = static_cast<uint8_t>(((load16(ip) >> 4) & 0xFF) >> 2);
  out->ecn = static_cast<uint8_t>((load16(ip) >> 4) & 3);
  std::memcpy(out->tuple.src, ip + 8, 16);
  std::memcpy(out->tuple.dst, ip + 24, 16);

  uint8_t next = ip[6];
  uint32_t pos = off + 40;
  uint32_t rem = payload;
  for (int n = 0;; ++n) {
    uint32_t hlen = 0;
    const uint8_t* p = nullptr;  // the extension header's first 4 bytes
    switch (next) {
      case kIpv6HopByHop:
        if (n != 0) return finish(out, ParseStatus::kBadIpv6ExtChain);
        [[fallthrough]];
      case kIpv6Routing:
      case kIpv6DestOpts:
        if (rem < 8) return finish(out, ParseStatus::kBadIpv6ExtChain);
        p = f.at(pos, 4, tmp);
        hlen = (p[1] + 1u) * 8u;
        break;
      case kIpv6Ah:
        if (rem < 8) return finish(out, ParseStatus::kBadIpv6ExtChain);
        p = f.at(pos, 4, tmp);
        hlen = (p[1] + 2u) * 4u;
        break;
      case kIpv6Fragment:
        if (rem < 8) return finish(out, ParseStatus::kBadIpv6ExtChain);
        p = f.at(pos, 4, tmp);
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
        return parse_l4(f, pos, rem, out);
    }
    if (n >= kMaxIpv6ExtHeaders || hlen > rem) {
      return finish(out, ParseStatus::kBadIpv6ExtChain);
    }
    next = p[0];
    pos += hlen;
    rem -= hlen;
  }
}

template <class Frame>
ParseStatus parse_frame(const Frame& f, ParsedPacket* out) noexcept {
  std::memset(out, 0, sizeof(*out));
  const uint32_t len = f.len();
  out->frame_len = len;
  if (len < kEtherHeader) return finish(out, ParseStatus::kTruncatedL2);

  uint8_t tmp[kMaxRead];
  uint16_t ether_type = load16(f.at(12, 2, tmp));
  uint32_t off = kEtherHeader;
  while (ether_type == kEtherVlan || ether_type == kEtherQinq) {
    if (out->vlan_count == kMaxVlans) return finish(out, ParseStatus::kTooManyVlans);
    if (len - off < kVlanTag) return finish(out, ParseStatus::kTruncatedVlan);
    const uint8_t* tag = f.at(off, kVlanTag, tmp);
    if (out->vlan_count == 0) out->vlan = load16(tag) & 0x0FFF;
    ether_type = load16(tag + 2);
    off += kVlanTag;
    ++out->vlan_count;
  }

  out->l3_offset = static_cast<uint16_t>(off);
  switch (ether_type) {
    case kEtherIpv4:
      return parse_ipv4(f, off, out);
    case kEtherIpv6:
      return parse_ipv6(f, off, out);
    default:
      return finish(out, ParseStatus::kNotIp);
  }
}

}  // namespace dripgate::dataplane::parse_detail
