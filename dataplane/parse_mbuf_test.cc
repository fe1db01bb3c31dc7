// parse_mbuf() on real multi-segment mbufs from a DPDK pool: for every frame shape, every
// truncation and every place a segment boundary can fall (two and three segments), it answers
// exactly as parse() does on the same bytes in one buffer, headers straddling segments
// included. A jumbo frame in 2 KiB segments, as a port receives it, parses whole.
#include "dataplane/parse_mbuf.h"

#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dataplane/parse_test_frames.h"
#include "tests/eal_environment.h"

namespace dripgate::dataplane {
namespace {

using namespace test_frames;  // NOLINT: the frame builders

::testing::Environment* const kEal = ::testing::AddGlobalTestEnvironment(
    new dripgate::testing::EalEnvironment("parse_mbuf_test", 64));

// A pool of default 2 KiB mbufs, as the dataplane's.
rte_mempool* pool() {
  static rte_mempool* p = rte_pktmbuf_pool_create("parse_mbuf_test", 1023, 0, 0,
                                                  RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  return p;
}

// The frame's bytes [0, len) in a chain of segments of the given lengths (the last one takes
// the rest), each segment's data at the start of its own buffer, as a PMD chains them.
struct Chain {
  rte_mbuf* head = nullptr;
  Chain(const Bytes& frame, size_t len, const std::vector<size_t>& cuts) {
    size_t at = 0;
    rte_mbuf* last = nullptr;
    for (size_t i = 0; i <= cuts.size(); ++i) {
      const size_t end = i < cuts.size() ? cuts[i] : len;
      rte_mbuf* m = rte_pktmbuf_alloc(pool());
      EXPECT_NE(m, nullptr);
      char* d = rte_pktmbuf_append(m, static_cast<uint16_t>(end - at));
      EXPECT_NE(d, nullptr);
      if (end > at) std::memcpy(d, frame.data() + at, end - at);
      if (last == nullptr) {
        head = m;
      } else {
        EXPECT_EQ(rte_pktmbuf_chain(head, m), 0);
      }
      last = m;
      at = end;
    }
  }
  ~Chain() { rte_pktmbuf_free(head); }
};

// parse() on a contiguous copy of frame[0, len).
ParsedPacket contiguous(const Bytes& frame, size_t len) {
  ParsedPacket p;
  parse(frame.data(), static_cast<uint32_t>(len), &p);
  return p;
}

ParsedPacket chained(const Bytes& frame, size_t len, const std::vector<size_t>& cuts) {
  Chain c(frame, len, cuts);
  EXPECT_EQ(c.head->nb_segs, cuts.size() + 1);
  EXPECT_EQ(rte_pktmbuf_pkt_len(c.head), len);
  ParsedPacket p;
  std::memset(&p, 0xCC, sizeof(p));  // parse_mbuf must overwrite everything
  const ParseStatus s = parse_mbuf(c.head, &p);
  EXPECT_EQ(s, p.status);
  return p;
}

// Every byte equal, padding included (both parsers zero the whole record first).
bool same(const ParsedPacket& a, const ParsedPacket& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

TEST(ParseMbuf, EveryTwoSegmentSplitOfEveryPrefixAgreesWithParse) {
  size_t straddling_ok = 0;
  for (const Bytes& f : valid_frames()) {
    for (size_t len = 1; len <= f.size(); ++len) {
      const ParsedPacket want = contiguous(f, len);
      for (size_t cut = 1; cut < len; ++cut) {
        const ParsedPacket got = chained(f, len, {cut});
        ASSERT_TRUE(same(got, want)) << "length " << len << " cut at " << cut << ": "
                                     << to_string(got.status) << " vs " << to_string(want.status);
        if (want.status == ParseStatus::kOk && cut < 14 + 40) ++straddling_ok;
      }
    }
  }
  // Not vacuous: many whole frames had their headers cut in two.
  EXPECT_GT(straddling_ok, 500u);
}

TEST(ParseMbuf, EveryThreeSegmentSplitOfEveryFrameAgreesWithParse) {
  for (const Bytes& f : valid_frames()) {
    const ParsedPacket want = contiguous(f, f.size());
    ASSERT_EQ(want.status, ParseStatus::kOk);
    for (size_t a = 1; a < f.size(); ++a)
      for (size_t b = a; b < f.size(); ++b) {  // b == a: an empty middle segment
        ASSERT_TRUE(same(chained(f, f.size(), {a, b}), want)) << "cuts " << a << ", " << b;
      }
  }
}

TEST(ParseMbuf, CorruptedHeadersAcrossSegmentsAgreeWithParse) {
  std::mt19937 rng(11);
  size_t kinds[kParseStatusCount] = {};
  for (const Bytes& base : valid_frames()) {
    const size_t header = std::min<size_t>(base.size(), 14 + 8 + 40 + 80);
    for (int round = 0; round < 300; ++round) {
      Bytes f = base;
      for (int k = 0; k < 3; ++k) f[rng() % header] = static_cast<uint8_t>(rng());
      const size_t cut = 1 + rng() % (f.size() - 1);
      const ParsedPacket want = contiguous(f, f.size());
      ASSERT_TRUE(same(chained(f, f.size(), {cut}), want)) << "cut at " << cut;
      ++kinds[static_cast<size_t>(want.status)];
    }
  }
  // The mutations reached valid frames and several kinds of malformed ones.
  size_t distinct = 0;
  for (size_t n : kinds) distinct += n != 0;
  EXPECT_GE(distinct, 6u);
}

// 9000-byte IPv4/UDP and IPv6/TCP frames as a port receives them into 2 KiB mbufs: the headers
// in the first segment, the lengths reaching into the last. parse() on the first segment alone
// (what the fast path had) calls them truncated; parse_mbuf reads them whole.
TEST(ParseMbuf, JumboFrameInTwoKibSegments) {
  const size_t room = RTE_MBUF_DEFAULT_BUF_SIZE - RTE_PKTMBUF_HEADROOM;
  const Bytes v4 =
      cat({eth(0x0800), ipv4({.proto = kUdp, .tos = 0xB8}, udp(4000, 5000, 9000 - 42))});
  const Bytes v6 =
      cat({eth(0x86DD, {{0x8100, 7}}), ipv6(kTcp, cat({tcp(80, 443), Bytes(8000, 1)}))});
  for (const Bytes* f : {&v4, &v6}) {
    std::vector<size_t> cuts;
    for (size_t at = room; at < f->size(); at += room) cuts.push_back(at);
    ASSERT_GE(cuts.size(), 3u);
    const ParsedPacket p = chained(*f, f->size(), cuts);
    EXPECT_EQ(p.status, ParseStatus::kOk) << to_string(p.status);
    EXPECT_EQ(p.frame_len, f->size());
    EXPECT_TRUE(same(p, contiguous(*f, f->size())));
    EXPECT_NE(contiguous(*f, room).status, ParseStatus::kOk);
  }
  const ParsedPacket p = chained(v4, v4.size(), {room, 2 * room, 3 * room, 4 * room});
  EXPECT_EQ(p.tuple.l3, L3::kIpv4);
  EXPECT_EQ(p.tuple.proto, kUdp);
  EXPECT_EQ(p.tuple.sport, 4000);
  EXPECT_EQ(p.tuple.dport, 5000);
  EXPECT_EQ(p.dscp, 0xB8 >> 2);
}

}  // namespace
}  // namespace dripgate::dataplane
