#include "dataplane/ecn.h"

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <cstring>
#include <random>
#include <vector>

namespace dripgate::dataplane {
namespace {

// The one's complement sum of the IPv4 header's 16-bit words, folded.
uint16_t fold_sum(const uint8_t* ip, unsigned len) {
  uint32_t sum = 0;
  for (unsigned i = 0; i < len; i += 2) sum += static_cast<uint32_t>((ip[i] << 8) | ip[i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

void set_checksum(uint8_t* ip) {
  ip[10] = ip[11] = 0;
  const uint16_t c = static_cast<uint16_t>(~fold_sum(ip, 20));
  ip[10] = static_cast<uint8_t>(c >> 8);
  ip[11] = static_cast<uint8_t>(c);
}

// An Ethernet frame (vlans tags) with an IPv4 header of that TOS and a UDP header.
std::vector<uint8_t> ipv4_frame(uint8_t tos, unsigned vlans = 0, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> f(14 + 4 * vlans + 20 + 8);
  for (auto& b : f) b = static_cast<uint8_t>(rng());
  unsigned off = 12;
  for (unsigned v = 0; v < vlans; ++v, off += 4) {
    f[off] = v == 0 && vlans == 2 ? 0x88 : 0x81;
    f[off + 1] = v == 0 && vlans == 2 ? 0xA8 : 0x00;
  }
  f[off] = 0x08;
  f[off + 1] = 0x00;
  uint8_t* ip = f.data() + off + 2;
  ip[0] = 0x45;
  ip[1] = tos;
  ip[2] = 0;
  ip[3] = 28;
  ip[6] = 0x40;
  ip[7] = 0;
  ip[9] = 17;
  set_checksum(ip);
  return f;
}

std::vector<uint8_t> ipv6_frame(uint8_t traffic_class) {
  std::vector<uint8_t> f(14 + 40 + 8, 0xAB);
  f[12] = 0x86;
  f[13] = 0xDD;
  uint8_t* ip = f.data() + 14;
  ip[0] = static_cast<uint8_t>(0x60 | (traffic_class >> 4));
  ip[1] = static_cast<uint8_t>((traffic_class << 4) | 0x0C);  // flow label's top nibble: C
  ip[4] = 0;
  ip[5] = 8;
  ip[6] = 17;
  return f;
}

TEST(Ecn, EctIsEct0OrEct1) {
  EXPECT_FALSE(ect(kNotEct));
  EXPECT_TRUE(ect(kEct1));
  EXPECT_TRUE(ect(kEct0));
  EXPECT_FALSE(ect(kCe));
}

TEST(Ecn, MarksEctIpv4AndKeepsTheChecksumValid) {
  for (uint8_t ecn : {kEct0, kEct1}) {
    for (uint32_t seed = 1; seed <= 2000; ++seed) {
      const uint8_t tos = static_cast<uint8_t>((seed * 4) | ecn);
      std::vector<uint8_t> f = ipv4_frame(tos, 0, seed);
      const std::vector<uint8_t> before = f;
      ASSERT_TRUE(mark_ce(f.data(), static_cast<uint32_t>(f.size())));
      uint8_t* ip = f.data() + 14;
      EXPECT_EQ(ip[1], static_cast<uint8_t>(tos | kCe));
      EXPECT_EQ(fold_sum(ip, 20), 0xFFFF) << "seed " << seed;
      // The same checksum a full recomputation gives.
      std::vector<uint8_t> again = f;
      set_checksum(again.data() + 14);
      EXPECT_EQ(again, f) << "seed " << seed;
      // Nothing else moved.
      for (size_t i = 0; i < f.size(); ++i) {
        if (i != 15 && i != 24 && i != 25) {
          ASSERT_EQ(f[i], before[i]) << i;
        }
      }
    }
  }
}

TEST(Ecn, MarksBehindVlanTags) {
  for (unsigned vlans : {1u, 2u}) {
    std::vector<uint8_t> f = ipv4_frame(0xB8 | kEct0, vlans, 7);
    ASSERT_TRUE(mark_ce(f.data(), static_cast<uint32_t>(f.size())));
    uint8_t* ip = f.data() + 14 + 4 * vlans;
    EXPECT_EQ(ip[1] & 3, kCe);
    EXPECT_EQ(ip[1] >> 2, 0xB8 >> 2);  // the DSCP stays
    EXPECT_EQ(fold_sum(ip, 20), 0xFFFF);
  }
}

TEST(Ecn, LeavesNotEctUntouchedAndCeAsItIs) {
  std::vector<uint8_t> f = ipv4_frame(0xB8 | kNotEct);
  const std::vector<uint8_t> before = f;
  EXPECT_FALSE(mark_ce(f.data(), static_cast<uint32_t>(f.size())));
  EXPECT_EQ(f, before);
  std::vector<uint8_t> ce = ipv4_frame(0xB8 | kCe);
  const std::vector<uint8_t> ce_before = ce;
  EXPECT_TRUE(mark_ce(ce.data(), static_cast<uint32_t>(ce.size())));
  EXPECT_EQ(ce, ce_before);
  std::vector<uint8_t> v6 = ipv6_frame(0xB8 | kNotEct);
  const std::vector<uint8_t> v6_before = v6;
  EXPECT_FALSE(mark_ce(v6.data(), static_cast<uint32_t>(v6.size())));
  EXPECT_EQ(v6, v6_before);
}

TEST(Ecn, MarksEctIpv6KeepingTheRestOfTheTrafficClassAndFlowLabel) {
  for (uint8_t ecn : {kEct0, kEct1, kCe}) {
    std::vector<uint8_t> f = ipv6_frame(static_cast<uint8_t>(0xB8 | ecn));
    std::vector<uint8_t> want = f;
    ASSERT_TRUE(mark_ce(f.data(), static_cast<uint32_t>(f.size())));
    want[15] = static_cast<uint8_t>((((0xB8 | kCe) & 0x0F) << 4) | 0x0C);
    EXPECT_EQ(f, want) << int{ecn};
    EXPECT_EQ(f[14], 0x6B);  // version 6, the traffic class's high nibble (0xB)
  }
}

TEST(Ecn, ShortAndNonIpFramesAreLeftAlone) {
  std::vector<uint8_t> f = ipv4_frame(kEct0);
  const std::vector<uint8_t> before = f;
  for (uint32_t len = 0; len < 14 + 20; ++len) {
    EXPECT_FALSE(mark_ce(f.data(), len)) << len;
    ASSERT_EQ(f, before);
  }
  std::vector<uint8_t> v6 = ipv6_frame(kEct0);
  EXPECT_FALSE(mark_ce(v6.data(), 14 + 39));
  std::vector<uint8_t> arp = ipv4_frame(kEct0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  const std::vector<uint8_t> arp_before = arp;
  EXPECT_FALSE(mark_ce(arp.data(), static_cast<uint32_t>(arp.size())));
  EXPECT_EQ(arp, arp_before);
  // An IPv4 ethertype over a header of another version.
  std::vector<uint8_t> bad = ipv4_frame(kEct0);
  bad[14] = 0x65;
  EXPECT_FALSE(mark_ce(bad.data(), static_cast<uint32_t>(bad.size())));
}

// The mbuf form reads the frame at the mbuf's data offset, its first segment's length.
TEST(Ecn, MarksAnMbufsFrame) {
  std::vector<uint8_t> buf(128 + 64, 0);
  const std::vector<uint8_t> f = ipv4_frame(kEct1);
  std::memcpy(buf.data() + 128, f.data(), f.size());
  rte_mbuf m;
  std::memset(&m, 0, sizeof(m));
  m.buf_addr = buf.data();
  m.data_off = 128;
  m.data_len = static_cast<uint16_t>(f.size());
  m.pkt_len = f.size();
  ASSERT_TRUE(mark_ce(&m));
  EXPECT_EQ(buf[128 + 15] & 3, kCe);
  EXPECT_EQ(fold_sum(buf.data() + 128 + 14, 20), 0xFFFF);
  m.data_len = 14 + 19;  // the header cut off in the first segment
  buf[128 + 15] = static_cast<uint8_t>((buf[128 + 15] & ~3) | kEct0);
  EXPECT_FALSE(mark_ce(&m));
}

}  // namespace
}  // namespace dripgate::dataplane
