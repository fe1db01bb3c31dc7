// Crafted frames for every header combination and every malformation. Each parse runs on a heap
// copy of exactly `len` bytes; this test is built with AddressSanitizer (see meson.build), so
// any read past the end fails the test.
#include "dataplane/parse.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dataplane/parse_test_frames.h"

namespace dripgate::dataplane {
namespace {

using namespace test_frames;  // NOLINT: the frame builders

// Parses a heap copy of exactly `len` bytes so ASan sees any overread.
ParsedPacket parse_exact(const Bytes& frame, size_t len) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[len]);
  if (len > 0) std::memcpy(buf.get(), frame.data(), len);
  ParsedPacket p;
  std::memset(&p, 0xCC, sizeof(p));  // parse must overwrite everything
  const ParseStatus s = parse(buf.get(), static_cast<uint32_t>(len), &p);
  EXPECT_EQ(s, p.status);
  EXPECT_EQ(p.frame_len, len);
  return p;
}
ParsedPacket parse_all(const Bytes& frame) {
  return parse_exact(frame, frame.size());
}

void expect_v4_tuple(const ParsedPacket& p, uint8_t proto, uint16_t sport, uint16_t dport) {
  EXPECT_EQ(p.tuple.l3, L3::kIpv4);
  const uint8_t src[16] = {10, 1, 2, 3};
  const uint8_t dst[16] = {10, 9, 8, 7};
  EXPECT_EQ(0, std::memcmp(p.tuple.src, src, 16));
  EXPECT_EQ(0, std::memcmp(p.tuple.dst, dst, 16));
  EXPECT_EQ(p.tuple.proto, proto);
  EXPECT_EQ(p.tuple.sport, sport);
  EXPECT_EQ(p.tuple.dport, dport);
  EXPECT_EQ(p.tuple.pad[0], 0);
  EXPECT_EQ(p.tuple.pad[1], 0);
}

void expect_v6_tuple(const ParsedPacket& p, uint8_t proto, uint16_t sport, uint16_t dport) {
  EXPECT_EQ(p.tuple.l3, L3::kIpv6);
  EXPECT_EQ(0, std::memcmp(p.tuple.src, kV6Src, 16));
  EXPECT_EQ(0, std::memcmp(p.tuple.dst, kV6Dst, 16));
  EXPECT_EQ(p.tuple.proto, proto);
  EXPECT_EQ(p.tuple.sport, sport);
  EXPECT_EQ(p.tuple.dport, dport);
}

TEST(Parse, Ipv4Tcp) {
  const Bytes f = cat({eth(0x0800), ipv4({.proto = kTcp, .tos = 46 << 2}, tcp(40000, 443))});
  const ParsedPacket p = parse_all(f);
  ASSERT_EQ(p.status, ParseStatus::kOk);
  expect_v4_tuple(p, kTcp, 40000, 443);
  EXPECT_EQ(p.dscp, 46);
  EXPECT_EQ(p.vlan_count, 0);
  EXPECT_EQ(p.vlan, 0);
  EXPECT_FALSE(p.fragment);
  EXPECT_EQ(p.l3_offset, 14);
  EXPECT_EQ(p.l4_offset, 34);
}

TEST(Parse, Ipv4Udp) {
  const ParsedPacket p = parse_all(cat({eth(0x0800), ipv4({.proto = kUdp}, udp(5353, 53))}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  expect_v4_tuple(p, kUdp, 5353, 53);
}

TEST(Parse, Ipv4OtherProtocolHasNoPorts) {
  const ParsedPacket p = parse_all(cat({eth(0x0800), ipv4({.proto = 1}, Bytes(8, 0))}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  expect_v4_tuple(p, 1, 0, 0);
  EXPECT_EQ(p.l4_offset, 0);
}

TEST(Parse, Ipv4OptionsShiftL4) {
  V4 h{.proto = kTcp};
  h.options = {0x01, 0x01, 0x01, 0x01, 0x44, 0x04, 0x05, 0x00};  // NOPs + timestamp-ish, IHL 7
  const ParsedPacket p = parse_all(cat({eth(0x0800), ipv4(h, tcp(1111, 2222))}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  expect_v4_tuple(p, kTcp, 1111, 2222);
  EXPECT_EQ(p.l4_offset, 14 + 28);
  h.options.assign(40, 0x01);  // the maximum, IHL 15
  const ParsedPacket q = parse_all(cat({eth(0x0800), ipv4(h, tcp(3, 4))}));
  ASSERT_EQ(q.status, ParseStatus::kOk);
  expect_v4_tuple(q, kTcp, 3, 4);
}

TEST(Parse, Ipv4EthernetPaddingIsIgnored) {
  Bytes f = cat({eth(0x0800), ipv4({.proto = kUdp}, udp(7, 9, 0))});  // 42 bytes
  f.resize(60, 0);
  const ParsedPacket p = parse_all(f);
  ASSERT_EQ(p.status, ParseStatus::kOk);
  expect_v4_tuple(p, kUdp, 7, 9);
  EXPECT_EQ(p.frame_len, 60u);
}

TEST(Parse, Vlan8021Q) {
  const ParsedPacket p =
      parse_all(cat({eth(0x0800, {{0x8100, 100}}), ipv4({.proto = kTcp}, tcp(1, 2))}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_EQ(p.vlan_count, 1);
  EXPECT_EQ(p.vlan, 100);
  EXPECT_EQ(p.l3_offset, 18);
  expect_v4_tuple(p, kTcp, 1, 2);
}

TEST(Parse, QinQ88a8RecordsOuterVlan) {
  const ParsedPacket p =
      parse_all(cat({eth(0x86DD, {{0x88A8, 300}, {0x8100, 7}}), ipv6(kUdp, udp(1000, 2000))}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_EQ(p.vlan_count, 2);
  EXPECT_EQ(p.vlan, 300);
  EXPECT_EQ(p.l3_offset, 22);
  expect_v6_tuple(p, kUdp, 1000, 2000);
}

TEST(Parse, QinQ8100Outer) {
  const ParsedPacket p = parse_all(
      cat({eth(0x0800, {{0x8100, 4095}, {0x8100, 1}}), ipv4({.proto = kUdp}, udp(1, 2))}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_EQ(p.vlan_count, 2);
  EXPECT_EQ(p.vlan, 4095);
}

TEST(Parse, ThreeTagsRejected) {
  const ParsedPacket p = parse_all(cat(
      {eth(0x0800, {{0x88A8, 1}, {0x8100, 2}, {0x8100, 3}}), ipv4({.proto = kUdp}, udp(1, 2))}));
  EXPECT_EQ(p.status, ParseStatus::kTooManyVlans);
}

TEST(Parse, NonIpPassesAsNotIp) {
  Bytes arp = eth(0x0806);
  arp.resize(42, 0);
  EXPECT_EQ(parse_all(arp).status, ParseStatus::kNotIp);
  Bytes vlan_arp = eth(0x0806, {{0x8100, 5}});
  vlan_arp.resize(46, 0);
  const ParsedPacket p = parse_all(vlan_arp);
  EXPECT_EQ(p.status, ParseStatus::kNotIp);
  EXPECT_EQ(p.vlan, 5);
  EXPECT_EQ(parse_all(eth(0x88CC)).status, ParseStatus::kNotIp);  // LLDP, header only
}

TEST(Parse, Ipv4FirstFragmentParsesPorts) {
  const ParsedPacket p =
      parse_all(cat({eth(0x0800), ipv4({.proto = kUdp, .frag = 0x2000}, udp(53, 5353, 64))}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_TRUE(p.fragment);
  expect_v4_tuple(p, kUdp, 53, 5353);
}

TEST(Parse, Ipv4NonFirstFragmentHasNoPorts) {
  // Offset 185 (1480 bytes), last fragment; the 3 payload bytes are too short for any header.
  const ParsedPacket p =
      parse_all(cat({eth(0x0800), ipv4({.proto = kTcp, .frag = 185}, Bytes{1, 2, 3})}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_TRUE(p.fragment);
  EXPECT_EQ(p.l4_offset, 0);
  expect_v4_tuple(p, kTcp, 0, 0);
  const ParsedPacket q =
      parse_all(cat({eth(0x0800), ipv4({.proto = kUdp, .frag = 0x2000 | 10}, Bytes(16, 0xFF))}));
  ASSERT_EQ(q.status, ParseStatus::kOk);
  expect_v4_tuple(q, kUdp, 0, 0);
}

TEST(Parse, Ipv4DontFragmentIsNotAFragment) {
  const ParsedPacket p =
      parse_all(cat({eth(0x0800), ipv4({.proto = kTcp, .frag = 0x4000}, tcp(5, 6))}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_FALSE(p.fragment);
  expect_v4_tuple(p, kTcp, 5, 6);
}

// The ECN field beside the DSCP, both families: the fast path's ect comes from it.
TEST(Parse, EcnBesideTheDscp) {
  for (uint8_t ecn = 0; ecn < 4; ++ecn) {
    const ParsedPacket v4 =
        parse_all(cat({eth(0x0800, {{0x8100, 7}}),
                       ipv4({.proto = kTcp, .tos = uint8_t(46 << 2 | ecn)}, tcp(1, 2))}));
    ASSERT_EQ(v4.status, ParseStatus::kOk);
    EXPECT_EQ(v4.dscp, 46);
    EXPECT_EQ(v4.ecn, ecn);
    const ParsedPacket v6 =
        parse_all(cat({eth(0x86DD), ipv6(kTcp, tcp(8080, 80), uint8_t(0xB8 | ecn))}));
    ASSERT_EQ(v6.status, ParseStatus::kOk);
    EXPECT_EQ(v6.dscp, 46);
    EXPECT_EQ(v6.ecn, ecn);
  }
}

TEST(Parse, Ipv6TcpAndDscp) {
  const ParsedPacket p = parse_all(cat({eth(0x86DD), ipv6(kTcp, tcp(8080, 80), 0xB8)}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  expect_v6_tuple(p, kTcp, 8080, 80);
  EXPECT_EQ(p.dscp, 46);
  EXPECT_EQ(p.l4_offset, 54);
}

TEST(Parse, Ipv6EachExtensionHeader) {
  struct Case {
    const char* name;
    uint8_t first;
    Bytes ext;
    bool fragment;
  };
  const std::vector<Case> cases = {
      {"hop-by-hop", kHbh, ext_generic(kUdp), false},
      {"hop-by-hop long", kHbh, ext_generic(kUdp, 3), false},
      {"routing", kRouting, ext_generic(kUdp, 2), false},
      {"destination options", kDstOpts, ext_generic(kUdp), false},
      {"first fragment", kFrag, ext_fragment(kUdp, 0, true), true},
      {"authentication header", kAh, ext_ah(kUdp), false},
      {"full chain", kHbh,
       cat({ext_generic(kDstOpts), ext_generic(kRouting), ext_generic(kFrag, 1),
            ext_fragment(kAh, 0, true), ext_ah(kDstOpts, 1), ext_generic(kUdp)}),
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Bytes f = cat({eth(0x86DD), ipv6(c.first, cat({c.ext, udp(4242, 53)}))});
    const ParsedPacket p = parse_all(f);
    ASSERT_EQ(p.status, ParseStatus::kOk) << to_string(p.status);
    expect_v6_tuple(p, kUdp, 4242, 53);
    EXPECT_EQ(p.l4_offset, 14 + 40 + c.ext.size());
    EXPECT_EQ(p.fragment, c.fragment);
  }
}

TEST(Parse, Ipv6NonFirstFragmentHasNoPorts) {
  const ParsedPacket p = parse_all(
      cat({eth(0x86DD), ipv6(kRouting, cat({ext_generic(kFrag), ext_fragment(kTcp, 100, false),
                                            Bytes{1, 2, 3, 4, 5}}))}));
  ASSERT_EQ(p.status, ParseStatus::kOk);
  EXPECT_TRUE(p.fragment);
  expect_v6_tuple(p, kTcp, 0, 0);
}

TEST(Parse, Ipv6ChainStopsAtEspNoNextAndUnknown) {
  for (uint8_t stop : {kEsp, kNoNext, kIcmp6, uint8_t{253}}) {
    SCOPED_TRACE(static_cast<int>(stop));
    const ParsedPacket p =
        parse_all(cat({eth(0x86DD), ipv6(kDstOpts, cat({ext_generic(stop), Bytes(12, 0x77)}))}));
    ASSERT_EQ(p.status, ParseStatus::kOk);
    expect_v6_tuple(p, stop, 0, 0);
  }
}

// ---- malformations ----

TEST(ParseMalformed, TruncatedL2) {
  const Bytes f = cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2))});
  for (size_t len = 0; len < 14; ++len) {
    EXPECT_EQ(parse_exact(f, len).status, ParseStatus::kTruncatedL2) << len;
  }
}

TEST(ParseMalformed, TruncatedVlan) {
  // A tag announced right at the end of the frame.
  EXPECT_EQ(parse_all(eth(0x8100)).status, ParseStatus::kTruncatedVlan);
  Bytes f = eth(0x8100, {{0x88A8, 1}});
  f.push_back(0);
  EXPECT_EQ(parse_all(f).status, ParseStatus::kTruncatedVlan);
}

TEST(ParseMalformed, Ipv4Header) {
  const Bytes good = cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2))});
  {
    Bytes f = good;
    f[14] = 0x65;  // version 6 in an IPv4 ethertype
    EXPECT_EQ(parse_all(f).status, ParseStatus::kBadIpVersion);
  }
  for (uint8_t ihl = 0; ihl < 5; ++ihl) {
    Bytes f = good;
    f[14] = static_cast<uint8_t>(0x40 | ihl);
    EXPECT_EQ(parse_all(f).status, ParseStatus::kBadIhl) << int(ihl);
  }
  {
    Bytes f = good;
    set16(f, 16, 19);  // total length below the 20-byte header
    EXPECT_EQ(parse_all(f).status, ParseStatus::kBadIpv4Len);
    f[14] = 0x46;  // IHL 24 bytes
    set16(f, 16, 23);
    EXPECT_EQ(parse_all(f).status, ParseStatus::kBadIpv4Len);
  }
  {
    Bytes f = good;
    set16(f, 16, static_cast<uint16_t>(good.size() - 14 + 1));  // one byte more than the frame
    EXPECT_EQ(parse_all(f).status, ParseStatus::kTruncatedIpv4);
  }
  {
    Bytes f = good;
    f[14] = 0x4F;  // IHL 60 > the 40 bytes that exist
    set16(f, 16, 60);
    f.resize(14 + 40);
    EXPECT_EQ(parse_all(f).status, ParseStatus::kTruncatedIpv4);
  }
}

TEST(ParseMalformed, TruncatedL4ByIpLength) {
  // TCP header cut by the IP total length (frame padded, so only the IP length says so).
  Bytes f = cat({eth(0x0800), ipv4({.proto = kTcp}, Bytes(10, 0))});
  f.resize(80, 0);
  EXPECT_EQ(parse_all(f).status, ParseStatus::kTruncatedL4);
  Bytes u = cat({eth(0x0800), ipv4({.proto = kUdp}, Bytes(7, 0))});
  EXPECT_EQ(parse_all(u).status, ParseStatus::kTruncatedL4);
  // A first fragment too short for the TCP header (the tiny-fragment trick).
  Bytes tiny = cat({eth(0x0800), ipv4({.proto = kTcp, .frag = 0x2000}, Bytes(8, 0))});
  EXPECT_EQ(parse_all(tiny).status, ParseStatus::kTruncatedL4);
  // TCP options announced beyond the segment.
  Bytes opts = cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2))});
  opts[14 + 20 + 12] = 0xF0;  // data offset 60 bytes, segment has 20
  EXPECT_EQ(parse_all(opts).status, ParseStatus::kTruncatedL4);
  // The same in IPv6.
  EXPECT_EQ(parse_all(cat({eth(0x86DD), ipv6(kUdp, Bytes(4, 0))})).status,
            ParseStatus::kTruncatedL4);
}

TEST(ParseMalformed, BadTcpOffset) {
  for (uint8_t words = 0; words < 5; ++words) {
    Bytes f = cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2))});
    f[14 + 20 + 12] = static_cast<uint8_t>(words << 4);
    EXPECT_EQ(parse_all(f).status, ParseStatus::kBadTcpOffset) << int(words);
  }
}

TEST(ParseMalformed, Ipv6Header) {
  const Bytes good = cat({eth(0x86DD), ipv6(kUdp, udp(1, 2))});
  {
    Bytes f = good;
    f[14] = 0x45;
    EXPECT_EQ(parse_all(f).status, ParseStatus::kBadIpVersion);
  }
  {
    Bytes f = good;
    set16(f, 14 + 4, static_cast<uint16_t>(good.size() - 54 + 1));
    EXPECT_EQ(parse_all(f).status, ParseStatus::kTruncatedIpv6);
  }
}

TEST(ParseMalformed, Ipv6ExtChain) {
  const auto frame = [](uint8_t first, const Bytes& payload) {
    return cat({eth(0x86DD), ipv6(first, payload)});
  };
  // Hop-by-hop anywhere but first.
  EXPECT_EQ(
      parse_all(frame(kDstOpts, cat({ext_generic(kHbh), ext_generic(kUdp), udp(1, 2)}))).status,
      ParseStatus::kBadIpv6ExtChain);
  // An extension header longer than the payload.
  {
    Bytes p = cat({ext_generic(kUdp, 2), udp(1, 2)});
    p[1] = 9;  // 80 bytes claimed, 40 present
    EXPECT_EQ(parse_all(frame(kRouting, p)).status, ParseStatus::kBadIpv6ExtChain);
    Bytes ah = cat({ext_ah(kUdp), udp(1, 2)});
    ah[1] = 200;
    EXPECT_EQ(parse_all(frame(kAh, ah)).status, ParseStatus::kBadIpv6ExtChain);
  }
  // Fewer than 8 bytes left where an extension header must start.
  for (uint8_t first : {kHbh, kRouting, kFrag, kAh, kDstOpts}) {
    EXPECT_EQ(parse_all(frame(first, Bytes(7, 0))).status, ParseStatus::kBadIpv6ExtChain)
        << int(first);
    EXPECT_EQ(parse_all(frame(first, Bytes{})).status, ParseStatus::kBadIpv6ExtChain) << int(first);
  }
  // Too many headers: 8 pass, 9 do not.
  for (int n : {8, 9}) {
    Bytes chain;
    for (int i = 0; i < n; ++i) append(chain, ext_generic(i + 1 < n ? kDstOpts : kUdp));
    const ParseStatus s = parse_all(frame(kDstOpts, cat({chain, udp(1, 2)}))).status;
    EXPECT_EQ(s, n == 8 ? ParseStatus::kOk : ParseStatus::kBadIpv6ExtChain) << n;
  }
}

// Every valid packet, cut at every shorter length, yields a truncation status (and ASan checks
// that nothing past the cut is read).
TEST(ParseMalformed, EveryPrefixOfEveryValidPacketIsTruncated) {
  const std::vector<Bytes> packets = valid_frames();

  const std::vector<ParseStatus> truncated = {
      ParseStatus::kTruncatedL2, ParseStatus::kTruncatedVlan, ParseStatus::kTruncatedIpv4,
      ParseStatus::kTruncatedIpv6};
  for (size_t i = 0; i < packets.size(); ++i) {
    const Bytes& f = packets[i];
    ASSERT_EQ(parse_all(f).status, ParseStatus::kOk) << "packet " << i;
    for (size_t len = 0; len < f.size(); ++len) {
      const ParseStatus s = parse_exact(f, len).status;
      EXPECT_NE(std::find(truncated.begin(), truncated.end(), s), truncated.end())
          << "packet " << i << " cut at " << len << ": " << to_string(s);
    }
  }
}

TEST(Parse, StatusNamesAreDistinct) {
  std::vector<std::string> names;
  for (size_t i = 0; i < kParseStatusCount; ++i) {
    const std::string n = to_string(static_cast<ParseStatus>(i));
    EXPECT_NE(n, "unknown");
    EXPECT_EQ(std::find(names.begin(), names.end(), n), names.end()) << n;
    names.push_back(n);
  }
  EXPECT_STREQ(to_string(ParseStatus::kTruncatedL2), "truncated-l2");
  EXPECT_STREQ(to_string(ParseStatus::kNotIp), "not-ip");
}

TEST(Parse, MakeTupleMatchesParsedTuple) {
  const ParsedPacket p = parse_all(cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(40000, 443))}));
  const auto t = dataplane::make_tuple("10.1.2.3", 40000, "10.9.8.7", 443, kTcp);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(0, std::memcmp(&*t, &p.tuple, sizeof(FiveTuple)));

  const ParsedPacket q = parse_all(cat({eth(0x86DD), ipv6(kUdp, udp(1, 2))}));
  const auto u = dataplane::make_tuple("2001:db8::1", 1, "2001:db8::2", 2, kUdp);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(0, std::memcmp(&*u, &q.tuple, sizeof(FiveTuple)));
  EXPECT_EQ(format_tuple(*u), "[2001:db8::1]:1 -> [2001:db8::2]:2 proto 17");
  EXPECT_EQ(format_tuple(*t), "10.1.2.3:40000 -> 10.9.8.7:443 proto 6");

  EXPECT_FALSE(dataplane::make_tuple("10.1.2.3", 1, "2001:db8::2", 2, kUdp));  // mixed families
  EXPECT_FALSE(dataplane::make_tuple("10.1.2", 1, "10.1.2.4", 2, kUdp));
  EXPECT_FALSE(dataplane::make_tuple("", 1, "10.1.2.4", 2, kUdp));
  EXPECT_FALSE(dataplane::make_tuple(std::string(100, '1'), 1, "10.1.2.4", 2, kUdp));
}

// The inline parser on a heap copy of exactly `len` bytes (ASan sees any overread). When it
// takes the frame, parse() must agree: kOk, untagged, unfragmented IPv4, the same key and DSCP.
bool fast_exact(const Bytes& frame, size_t len) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[len]);
  if (len > 0) std::memcpy(buf.get(), frame.data(), len);
  Ipv4Key k;
  std::memset(&k, 0xCC, sizeof(k));
  uint8_t dscp = 0xCC;
  if (!parse_ipv4_fast(buf.get(), static_cast<uint32_t>(len), &k, &dscp)) return false;
  const ParsedPacket p = parse_exact(frame, len);
  EXPECT_EQ(p.status, ParseStatus::kOk);
  EXPECT_EQ(p.tuple.l3, L3::kIpv4);
  EXPECT_EQ(p.vlan_count, 0);
  EXPECT_FALSE(p.fragment);
  EXPECT_EQ(p.dscp, dscp);
  const Ipv4Key want = to_ipv4_key(p.tuple);
  EXPECT_EQ(0, std::memcmp(&k, &want, sizeof(k)));
  return true;
}
bool fast_all(const Bytes& frame) {
  return fast_exact(frame, frame.size());
}

TEST(ParseFast, TakesUntaggedUnfragmentedIpv4UdpAndTcp) {
  EXPECT_TRUE(fast_all(cat({eth(0x0800), ipv4({.proto = kTcp, .tos = 46 << 2}, tcp(40000, 443))})));
  EXPECT_TRUE(fast_all(cat({eth(0x0800), ipv4({.proto = kUdp, .tos = 3}, udp(5353, 53))})));
  EXPECT_TRUE(fast_all(cat({eth(0x0800), ipv4({.proto = kUdp}, udp(1, 2, 0))})));   // 8-byte UDP
  EXPECT_TRUE(fast_all(cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2, 15))})));  // TCP options
  EXPECT_TRUE(
      fast_all(cat({eth(0x0800), ipv4({.proto = kTcp, .frag = 0x4000}, tcp(1, 2))})));  // DF
  // Ethernet padding after the IP packet.
  EXPECT_TRUE(fast_all(cat({eth(0x0800), ipv4({.proto = kUdp}, udp(1, 2, 0)), Bytes(30, 0)})));
  Ipv4Key k;
  uint8_t dscp = 0;
  const Bytes f = cat({eth(0x0800), ipv4({.proto = kTcp, .tos = 46 << 2}, tcp(40000, 443))});
  ASSERT_TRUE(parse_ipv4_fast(f.data(), static_cast<uint32_t>(f.size()), &k, &dscp));
  const auto t = dataplane::make_tuple("10.1.2.3", 40000, "10.9.8.7", 443, kTcp);
  ASSERT_TRUE(t.has_value());
  const Ipv4Key want = to_ipv4_key(*t);
  EXPECT_EQ(0, std::memcmp(&k, &want, sizeof(k)));
  EXPECT_EQ(dscp, 46);
}

// Options, fragments, VLAN tags, other protocols and families, and every malformation are the
// general parser's: the inline one declines them (what parse() makes of them is tested above).
TEST(ParseFast, LeavesEveryOtherFrameToParse) {
  const std::vector<Bytes> frames = {
      cat({eth(0x0800), ipv4({.proto = kTcp, .options = Bytes(4, 1)}, tcp(1, 2))}),
      cat({eth(0x0800), ipv4({.proto = kUdp, .options = Bytes(40, 1)}, udp(1, 2))}),
      cat({eth(0x0800), ipv4({.proto = kTcp, .frag = 0x2000}, tcp(1, 2))}),  // first fragment
      cat({eth(0x0800), ipv4({.proto = kTcp, .frag = 0x6000}, tcp(1, 2))}),  // DF + MF
      cat({eth(0x0800), ipv4({.proto = kUdp, .frag = 99}, udp(1, 2))}),      // non-first
      cat({eth(0x0800), ipv4({.proto = kUdp, .frag = 0x0100}, udp(1, 2))}),  // offset high bits
      cat({eth(0x0800, {{0x8100, 10}}), ipv4({.proto = kUdp}, udp(1, 2))}),
      cat({eth(0x0800, {{0x88A8, 10}, {0x8100, 20}}), ipv4({.proto = kTcp}, tcp(1, 2))}),
      cat({eth(0x0800), ipv4({.proto = 1}, Bytes(16, 0))}),  // ICMP
      cat({eth(0x86DD), ipv6(kUdp, udp(1, 2))}),
      cat({eth(0x0806), Bytes(28, 0)}),                         // ARP
      cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2, 4))}),  // TCP data offset < 5
      cat({eth(0x0800), ipv4({.proto = kTcp}, Bytes(19, 0))}),  // TCP cut by the IP length
      cat({eth(0x0800), ipv4({.proto = kUdp}, Bytes(7, 0))}),   // UDP cut by the IP length
  };
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_FALSE(fast_all(frames[i])) << "frame " << i;
  }
  // Header fields the general parser rejects: version, IHL, total length below the header or
  // beyond the frame, a TCP data offset beyond the IP length.
  const Bytes good = cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2))});
  auto with = [&](size_t at, uint8_t v) {
    Bytes b = good;
    b[at] = v;
    return b;
  };
  EXPECT_FALSE(fast_all(with(14, 0x65)));
  EXPECT_FALSE(fast_all(with(14, 0x44)));
  Bytes b = good;
  set16(b, 16, 19);
  EXPECT_FALSE(fast_all(b));
  set16(b, 16, static_cast<uint16_t>(good.size() - 14 + 1));
  EXPECT_FALSE(fast_all(b));
  EXPECT_FALSE(fast_all(with(14 + 20 + 12, 0x60)));  // 24-byte TCP header in 20 bytes
}

TEST(ParseFast, ShortFramesFallBack) {
  const std::vector<Bytes> packets = {
      cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2))}),
      cat({eth(0x0800), ipv4({.proto = kUdp}, udp(1, 2, 0))}),
      cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2, 10))}),
  };
  for (size_t i = 0; i < packets.size(); ++i) {
    ASSERT_TRUE(fast_all(packets[i])) << "packet " << i;
    for (size_t len = 0; len < packets[i].size(); ++len)
      EXPECT_FALSE(fast_exact(packets[i], len)) << "packet " << i << " cut at " << len;
  }
}

// Random corruptions of the headers: whenever the inline parser takes a frame, parse() agrees.
TEST(ParseFast, AgreesWithParseOnCorruptedHeaders) {
  const std::vector<Bytes> bases = {
      cat({eth(0x0800), ipv4({.proto = kTcp}, tcp(1, 2))}),
      cat({eth(0x0800), ipv4({.proto = kUdp}, udp(1, 2, 0)), Bytes(6, 0)}),
      cat({eth(0x0800), ipv4({.proto = kTcp, .options = Bytes(4, 1)}, tcp(1, 2))}),
      cat({eth(0x0800, {{0x8100, 10}}), ipv4({.proto = kUdp}, udp(1, 2))}),
  };
  std::mt19937 rng(7);
  unsigned taken = 0;
  for (unsigned iter = 0; iter < 20000; ++iter) {
    Bytes f = bases[iter % bases.size()];
    for (unsigned flips = 1 + rng() % 3; flips > 0; --flips) {
      f[12 + rng() % (f.size() - 12)] = static_cast<uint8_t>(rng());
    }
    taken += fast_exact(f, f.size() - rng() % 4);
  }
  EXPECT_GT(taken, 1000u);  // the corruptions leave many frames valid
}

// The inline non-IP test on a heap copy of exactly `len` bytes: when it says non-IP, parse()
// must answer kNotIp.
bool non_ip_exact(const Bytes& frame, size_t len) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[len]);
  if (len > 0) std::memcpy(buf.get(), frame.data(), len);
  if (!is_non_ip_fast(buf.get(), static_cast<uint32_t>(len))) return false;
  EXPECT_EQ(parse_exact(frame, len).status, ParseStatus::kNotIp);
  return true;
}

TEST(ParseFast, NonIpInline) {
  EXPECT_TRUE(non_ip_exact(cat({eth(0x0806), Bytes(28, 0)}), 42));  // ARP
  EXPECT_TRUE(non_ip_exact(Bytes(64, 0), 64));                      // all zeroes
  EXPECT_TRUE(non_ip_exact(Bytes(14, 0), 14));                      // header alone
  const std::vector<Bytes> others = {
      cat({eth(0x0800), ipv4({.proto = kUdp}, udp(1, 2))}),
      cat({eth(0x86DD), ipv6(kUdp, udp(1, 2))}),
      cat({eth(0x0806, {{0x8100, 10}}), Bytes(28, 0)}),  // tagged ARP: parse() reads the tag
      cat({eth(0x0806, {{0x88A8, 10}}), Bytes(28, 0)}),
  };
  for (size_t i = 0; i < others.size(); ++i)
    EXPECT_FALSE(non_ip_exact(others[i], others[i].size())) << "frame " << i;
  for (size_t len = 0; len < 14; ++len)
    EXPECT_FALSE(non_ip_exact(Bytes(64, 0), len)) << "cut at " << len;  // truncated-l2
  // Every ethertype: non-IP exactly when it is none of the four parse() looks into.
  for (unsigned e = 0; e <= 0xFFFF; ++e) {
    Bytes f(64, 0);
    f[12] = static_cast<uint8_t>(e >> 8);
    f[13] = static_cast<uint8_t>(e);
    const bool looked_into = e == 0x0800 || e == 0x86DD || e == 0x8100 || e == 0x88A8;
    ASSERT_EQ(non_ip_exact(f, f.size()), !looked_into) << "ethertype " << e;
  }
  // Random ethertypes and lengths: whenever the inline test says non-IP, parse() agrees.
  std::mt19937 rng(11);
  unsigned non_ip = 0;
  for (unsigned iter = 0; iter < 20000; ++iter) {
    Bytes f = cat({eth(0x0800), ipv4({.proto = kUdp}, udp(1, 2))});
    f[12] = static_cast<uint8_t>(iter % 3 == 0 ? rng() : (iter % 3 == 1 ? 0x81 : 0x08));
    f[13] = static_cast<uint8_t>(rng());
    non_ip += non_ip_exact(f, f.size() - rng() % 40);
  }
  EXPECT_GT(non_ip, 5000u);
}

}  // namespace
}  // namespace dripgate::dataplane
