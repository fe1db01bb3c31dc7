// Frame builders shared by the parser's tests (parse_test, parse_mbuf_test): crafted
// Ethernet, VLAN, IPv4, IPv6 (extension headers), TCP and UDP headers, byte by byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

// The crafted headers use designated initializers that name only what a case changes.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace dripgate::dataplane::test_frames {

using Bytes = std::vector<uint8_t>;

inline void put16(Bytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}
inline void set16(Bytes& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v);
}
inline void append(Bytes& b, const Bytes& more) {
  b.insert(b.end(), more.begin(), more.end());
}

struct Tag {
  uint16_t tpid;
  uint16_t vid;
};

inline Bytes eth(uint16_t ether_type, std::initializer_list<Tag> tags = {}) {
  Bytes b = {0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02};
  for (const Tag& t : tags) {
    put16(b, t.tpid);
    put16(b, static_cast<uint16_t>(0x2000 | t.vid));  // PCP 1: must not leak into the id
  }
  put16(b, ether_type);
  return b;
}

inline Bytes tcp(uint16_t sport, uint16_t dport, uint8_t data_offset_words = 5) {
  Bytes b;
  put16(b, sport);
  put16(b, dport);
  b.resize(20, 0);
  b[12] = static_cast<uint8_t>(data_offset_words << 4);
  b.resize(data_offset_words >= 5 ? data_offset_words * 4u : 20u, 0x01);  // options: NOPs
  return b;
}

inline Bytes udp(uint16_t sport, uint16_t dport, size_t payload = 4) {
  Bytes b;
  put16(b, sport);
  put16(b, dport);
  put16(b, static_cast<uint16_t>(8 + payload));
  put16(b, 0);
  b.resize(8 + payload, 0xAB);
  return b;
}

struct V4 {
  uint8_t proto = 6;
  uint8_t tos = 0;
  uint16_t frag = 0;  // flags + offset field
  Bytes options;
};

inline Bytes ipv4(const V4& h, const Bytes& payload) {
  Bytes b;
  const size_t ihl = 20 + h.options.size();
  b.push_back(static_cast<uint8_t>(0x40 | (ihl / 4)));
  b.push_back(h.tos);
  put16(b, static_cast<uint16_t>(ihl + payload.size()));
  put16(b, 0x1234);
  put16(b, h.frag);
  b.push_back(64);
  b.push_back(h.proto);
  put16(b, 0);
  append(b, {10, 1, 2, 3});
  append(b, {10, 9, 8, 7});
  append(b, h.options);
  append(b, payload);
  return b;
}

inline constexpr uint8_t kV6Src[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0,
                                       0,    0,    0,    0,    0, 0, 0, 0x01};
inline constexpr uint8_t kV6Dst[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0,
                                       0,    0,    0,    0,    0, 0, 0, 0x02};

inline Bytes ipv6(uint8_t next, const Bytes& payload, uint8_t traffic_class = 0) {
  Bytes b;
  const uint32_t first = (6u << 28) | (static_cast<uint32_t>(traffic_class) << 20) | 0x12345;
  put16(b, static_cast<uint16_t>(first >> 16));
  put16(b, static_cast<uint16_t>(first));
  put16(b, static_cast<uint16_t>(payload.size()));
  b.push_back(next);
  b.push_back(64);
  b.insert(b.end(), kV6Src, kV6Src + 16);
  b.insert(b.end(), kV6Dst, kV6Dst + 16);
  append(b, payload);
  return b;
}

// Hop-by-hop, routing and destination options share the (next, len in 8-byte units - 1) layout.
inline Bytes ext_generic(uint8_t next, uint8_t len_units = 0) {
  Bytes b = {next, len_units};
  b.resize((len_units + 1u) * 8u, 0);
  return b;
}
inline Bytes ext_fragment(uint8_t next, uint16_t offset_units, bool more) {
  Bytes b = {next, 0};
  put16(b, static_cast<uint16_t>((offset_units << 3) | (more ? 1 : 0)));
  append(b, {0xDE, 0xAD, 0xBE, 0xEF});
  return b;
}
inline Bytes ext_ah(uint8_t next, uint8_t len_field = 4) {  // (len + 2) * 4 bytes; 4 -> 24 bytes
  Bytes b = {next, len_field};
  b.resize((len_field + 2u) * 4u, 0x5A);
  return b;
}

inline Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes b;
  for (const Bytes& p : parts) append(b, p);
  return b;
}

inline constexpr uint8_t kTcp = 6, kUdp = 17, kIcmp6 = 58, kEsp = 50, kNoNext = 59;
inline constexpr uint8_t kHbh = 0, kRouting = 43, kFrag = 44, kAh = 51, kDstOpts = 60;

// One valid frame of each shape the parser knows: every prefix of each is truncated.
inline std::vector<Bytes> valid_frames() {
  return {
      cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2))}),
      cat({eth(0x0800), ipv4({.proto = kUdp}, udp(1, 2))}),
      cat({eth(0x0800), ipv4({.proto = kTcp, .options = Bytes(12, 1)}, tcp(1, 2, 8))}),
      cat({eth(0x0800), ipv4({.proto = kTcp, .frag = 0x2000}, tcp(1, 2))}),
      cat({eth(0x0800), ipv4({.proto = kTcp, .frag = 99}, Bytes(9, 0))}),
      cat({eth(0x0800, {{0x8100, 10}}), ipv4({.proto = kUdp}, udp(1, 2))}),
      cat({eth(0x0800, {{0x88A8, 10}, {0x8100, 20}}), ipv4({.proto = kTcp}, tcp(1, 2))}),
      cat({eth(0x86DD), ipv6(kTcp, tcp(1, 2))}),
      cat({eth(0x86DD, {{0x88A8, 1}, {0x8100, 2}}), ipv6(kUdp, udp(1, 2))}),
      cat({eth(0x86DD),
           ipv6(kHbh, cat({ext_generic(kRouting), ext_generic(kFrag, 1), ext_fragment(kAh, 0, true),
                           ext_ah(kDstOpts), ext_generic(kTcp), tcp(1, 2)}))}),
      cat({eth(0x86DD), ipv6(kFrag, cat({ext_fragment(kUdp, 7, false), Bytes(3, 0)}))}),
      cat({eth(0x86DD), ipv6(kEsp, Bytes(16, 0))}),
  };
}

}  // namespace dripgate::dataplane::test_frames
