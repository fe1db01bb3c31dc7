#include "tools/iat/pcap.h"

#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tools/iat/text.h"

namespace dripgate::iat {
namespace {

constexpr uint64_t kBase = 1'700'000'000ull * 1'000'000'000ull;  // on the 1 ms grid

struct Packet {
  uint64_t ts_ns;
  uint16_t dport;
};

// Ethernet + IPv4 + UDP + 18 bytes: a 60-byte frame.
std::vector<uint8_t> udp_frame(uint16_t dport) {
  std::vector<uint8_t> f(60, 0);
  const uint8_t dst[6] = {0x02, 0, 0, 0, 0, 2}, src[6] = {0x02, 0, 0, 0, 0, 1};
  std::memcpy(f.data(), dst, 6);
  std::memcpy(f.data() + 6, src, 6);
  f[12] = 0x08;  // IPv4
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  ip[3] = 46;  // total length 20 + 8 + 18
  ip[8] = 64;
  ip[9] = 17;  // UDP
  const uint8_t sa[4] = {10, 0, 0, 1}, da[4] = {10, 0, 0, 2};
  std::memcpy(ip + 12, sa, 4);
  std::memcpy(ip + 16, da, 4);
  uint8_t* udp = ip + 20;
  udp[0] = 0x30;  // sport 12345
  udp[1] = 0x39;
  udp[2] = static_cast<uint8_t>(dport >> 8);
  udp[3] = static_cast<uint8_t>(dport);
  udp[5] = 26;
  return f;
}

class TempDir {
 public:
  TempDir() {
    path_ =
        std::filesystem::temp_directory_path() / ("iat_pcap_test." + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_pcap(const std::string& path, const std::vector<Packet>& pkts, bool nano) {
  pcap_t* dead = pcap_open_dead_with_tstamp_precision(
      DLT_EN10MB, 65535, nano ? PCAP_TSTAMP_PRECISION_NANO : PCAP_TSTAMP_PRECISION_MICRO);
  ASSERT_NE(dead, nullptr);
  pcap_dumper_t* d = pcap_dump_open(dead, path.c_str());
  ASSERT_NE(d, nullptr) << pcap_geterr(dead);
  for (const auto& p : pkts) {
    auto f = udp_frame(p.dport);
    pcap_pkthdr h{};
    h.ts.tv_sec = static_cast<time_t>(p.ts_ns / 1'000'000'000ull);
    uint64_t frac = p.ts_ns % 1'000'000'000ull;
    h.ts.tv_usec = static_cast<suseconds_t>(nano ? frac : frac / 1000);
    h.caplen = h.len = static_cast<bpf_u_int32>(f.size());
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data());
  }
  pcap_dump_close(d);
  pcap_close(dead);
}

// libpcap reads pcapng but does not write it: a minimal writer (SHB, IDB with if_tsresol = 9,
// EPBs), little-endian.
class PcapngWriter {
 public:
  // nano = false: no if_tsresol option, i.e. the pcapng default of microseconds.
  explicit PcapngWriter(const std::string& path, bool nano = true)
      : out_(path, std::ios::binary), nano_(nano) {
    std::vector<uint8_t> shb;
    put32(shb, 0x1A2B3C4D);
    put16(shb, 1);
    put16(shb, 0);
    put32(shb, 0xFFFFFFFF);  // section length unknown
    put32(shb, 0xFFFFFFFF);
    block(0x0A0D0D0A, shb);
    std::vector<uint8_t> idb;
    put16(idb, 1);  // LINKTYPE_ETHERNET
    put16(idb, 0);
    put32(idb, 65535);
    if (nano) {
      put16(idb, 9);  // if_tsresol
      put16(idb, 1);
      idb.push_back(9);  // 10^-9 s
      idb.insert(idb.end(), 3, 0);
      put32(idb, 0);  // opt_endofopt
    }
    block(1, idb);
  }
  void packet(uint64_t ts_ns, const std::vector<uint8_t>& frame) {
    const uint64_t ts = nano_ ? ts_ns : ts_ns / 1000;
    std::vector<uint8_t> epb;
    put32(epb, 0);
    put32(epb, static_cast<uint32_t>(ts >> 32));
    put32(epb, static_cast<uint32_t>(ts));
    put32(epb, static_cast<uint32_t>(frame.size()));
    put32(epb, static_cast<uint32_t>(frame.size()));
    epb.insert(epb.end(), frame.begin(), frame.end());
    while (epb.size() % 4) epb.push_back(0);
    block(6, epb);
  }

 private:
  static void put16(std::vector<uint8_t>& v, uint16_t x) {
    v.push_back(static_cast<uint8_t>(x));
    v.push_back(static_cast<uint8_t>(x >> 8));
  }
  static void put32(std::vector<uint8_t>& v, uint32_t x) {
    for (int i = 0; i < 4; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
  }
  void block(uint32_t type, const std::vector<uint8_t>& body) {
    std::vector<uint8_t> b;
    uint32_t len = static_cast<uint32_t>(12 + body.size());
    put32(b, type);
    put32(b, len);
    b.insert(b.end(), body.begin(), body.end());
    put32(b, len);
    out_.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  std::ofstream out_;
  bool nano_;
};

// Micro-bursts in miniature: 10 bursts one millisecond apart, 50 packets 2 us apart in each,
// alternating destination ports 9000 and 9001.
std::vector<Packet> burst_pattern() {
  std::vector<Packet> v;
  for (uint64_t b = 0; b < 10; ++b)
    for (uint64_t j = 0; j < 50; ++j)
      v.push_back({kBase + b * 1'000'000 + j * 2'000, static_cast<uint16_t>(j % 2 ? 9001 : 9000)});
  return v;
}

void expect_burst_figures(const Profile& p) {
  EXPECT_EQ(p.packets, 500u);
  EXPECT_EQ(p.bytes, 500u * 60);
  EXPECT_EQ(p.intervals, 499u);
  EXPECT_EQ(p.hist[iat_bucket(2'000)], 490u);
  EXPECT_EQ(p.hist[iat_bucket(902'000)], 9u);
  EXPECT_EQ(p.first_ns, kBase);
  EXPECT_EQ(p.last_ns, kBase + 9'098'000);
  EXPECT_DOUBLE_EQ(p.mean_rate_pps, 499 / 9.098e-3);
  EXPECT_EQ(p.max_iat_ns, 902'000.0);
  EXPECT_TRUE(p.cv_exact);
  const unsigned bs = iat_bucket(2'000);
  EXPECT_DOUBLE_EQ(p.percentiles[0].value_ns,
                   double(bucket_low(bs)) + 249.5 / 490 * double(bucket_high(bs) - bucket_low(bs)));
  ASSERT_EQ(p.windows.size(), 2u);
  EXPECT_EQ(p.windows[0].width_ns, 100'000u);
  EXPECT_EQ(p.windows[0].max_count, 50u);
  EXPECT_EQ(p.windows[0].windows, 10u);
  EXPECT_DOUBLE_EQ(p.windows[0].peak_rate_pps, 500'000.0);
  EXPECT_DOUBLE_EQ(p.windows[0].burst_factor, 500'000.0 / (499 / 9.098e-3));
  EXPECT_EQ(p.windows[1].max_count, 50u);
  EXPECT_EQ(p.ts_resolution_ns, 1u);
}

TEST(IatPcap, NanosecondPcapGivesExactFigures) {
  TempDir dir;
  auto path = dir.file("bursts.pcap");
  write_pcap(path, burst_pattern(), true);
  Profile p = profile_pcap(path, {});
  expect_burst_figures(p);
  EXPECT_EQ(p.mode, "pcap");
}

TEST(IatPcap, PcapngWithNanosecondResolution) {
  TempDir dir;
  auto path = dir.file("bursts.pcapng");
  {
    PcapngWriter w(path);
    for (const auto& pk : burst_pattern()) w.packet(pk.ts_ns, udp_frame(pk.dport));
  }
  expect_burst_figures(profile_pcap(path, {}));
}

TEST(IatPcap, PcapngDefaultsToMicroseconds) {
  TempDir dir;
  auto path = dir.file("micro.pcapng");
  {
    PcapngWriter w(path, false);
    for (const auto& pk : burst_pattern()) w.packet(pk.ts_ns, udp_frame(pk.dport));
  }
  Profile p = profile_pcap(path, {});
  EXPECT_EQ(p.packets, 500u);
  EXPECT_EQ(p.hist[iat_bucket(2'000)], 490u);
  EXPECT_EQ(p.last_ns, kBase + 9'098'000);
  EXPECT_EQ(p.ts_resolution_ns, 1000u);
}

TEST(IatPcap, FilterSelectsHalf) {
  TempDir dir;
  auto path = dir.file("bursts.pcap");
  write_pcap(path, burst_pattern(), true);
  PcapOptions o;
  o.filter = "udp dst port 9000";
  Profile p = profile_pcap(path, o);
  EXPECT_EQ(p.packets, 250u);
  // Inside a burst every other packet: 4 us; across bursts from packet 48 to packet 0.
  EXPECT_EQ(p.hist[iat_bucket(4'000)], 240u);
  EXPECT_EQ(p.hist[iat_bucket(904'000)], 9u);
  EXPECT_EQ(p.windows[0].max_count, 25u);
  EXPECT_NE(p.source.find("udp dst port 9000"), std::string::npos);
}

TEST(IatPcap, MicrosecondPcapIsReadAndNoted) {
  TempDir dir;
  auto path = dir.file("micro.pcap");
  write_pcap(path, burst_pattern(), false);
  Profile p = profile_pcap(path, {});
  EXPECT_EQ(p.packets, 500u);
  EXPECT_EQ(p.hist[iat_bucket(2'000)], 490u);
  EXPECT_EQ(p.ts_resolution_ns, 1000u);
}

// A 500 kpps stream as a receiver sees it: 1000 gaps of 2 us, every tenth 100 ns late and the
// next one 100 ns early (back on the grid), one 300 ns pair, and one lost packet (a 4 us gap).
std::vector<Packet> paced_stream() {
  std::vector<int64_t> dev(1000, 0);
  for (size_t g = 0; g < dev.size(); ++g) dev[g] = g % 10 == 0 ? 100 : g % 10 == 1 ? -100 : 0;
  dev[500] = 300;
  dev[501] = -300;
  dev[700] = 2'000;
  dev[701] = 0;
  std::vector<Packet> v{{kBase, 9000}};
  for (int64_t d : dev) v.push_back({v.back().ts_ns + static_cast<uint64_t>(2'000 + d), 9000});
  return v;
}

void expect_paced_fit(const Profile& p) {
  ASSERT_TRUE(p.interval);
  const auto& f = *p.interval;
  EXPECT_EQ(f.gaps, 1000u);
  // |deviation|: 801 x 0, 196 x 100, 2 x 300, 1 x 2000.
  EXPECT_EQ(f.within, (std::array<uint64_t, 5>{801, 997, 997, 999, 999}));
  EXPECT_EQ(f.p50_ns, 0u);
  EXPECT_EQ(f.p99_ns, 100u);
  EXPECT_EQ(f.p999_ns, 300u);
  EXPECT_EQ(f.max_ns, 2'000u);
  EXPECT_NEAR(f.rate_offset, 2'000'000.0 / 2'002'000.0 - 1, 1e-12);
}

TEST(IatPcap, IntervalFitFromNanosecondStamps) {
  TempDir dir;
  auto path = dir.file("paced.pcap");
  write_pcap(path, paced_stream(), true);
  PcapOptions o;
  o.interval_ns = 2'000;
  expect_paced_fit(profile_pcap(path, o));
  auto ng = dir.file("paced.pcapng");
  {
    PcapngWriter w(ng);
    for (const auto& pk : paced_stream()) w.packet(pk.ts_ns, udp_frame(pk.dport));
  }
  expect_paced_fit(profile_pcap(ng, o));
  EXPECT_FALSE(profile_pcap(path, {}).interval);
}

TEST(IatPcap, IntervalFitCountsOnlyFilteredPackets) {
  TempDir dir;
  auto path = dir.file("mixed.pcap");
  // The paced stream on port 9000 interleaved with stray packets on 9001, 500 ns after each.
  std::vector<Packet> v;
  for (const auto& pk : paced_stream()) {
    v.push_back(pk);
    v.push_back({pk.ts_ns + 500, 9001});
  }
  write_pcap(path, v, true);
  PcapOptions o;
  o.interval_ns = 2'000;
  o.filter = "udp dst port 9000";
  expect_paced_fit(profile_pcap(path, o));
}

// A clock that steps back: stamps earlier than their predecessor are counted apart, never filed
// as gaps, so no percentile exceeds the exact max.
TEST(IatPcap, BackwardsTimestampsAreCountedApart) {
  TempDir dir;
  // 1 us apart, the sixth stamp 3 us early: gaps 4 x 1 us, then 2 us from the latest stamp on.
  std::vector<Packet> stepped;
  for (uint64_t j = 0; j < 10; ++j) stepped.push_back({kBase + (j == 5 ? 2 : j) * 1'000, 9000});
  auto path = dir.file("stepped.pcap");
  write_pcap(path, stepped, true);
  Profile p = profile_pcap(path, {});
  EXPECT_EQ(p.packets, 10u);
  EXPECT_EQ(p.out_of_order, 1u);
  EXPECT_EQ(p.intervals, 8u);
  EXPECT_EQ(p.hist[iat_bucket(1'000)], 7u);
  EXPECT_EQ(p.hist[iat_bucket(2'000)], 1u);
  EXPECT_EQ(p.hist[0], 0u);
  EXPECT_EQ(p.max_iat_ns, 2'000.0);
  for (const auto& q : p.percentiles) EXPECT_LE(q.value_ns, p.max_iat_ns) << quantile_name(q.q);
  EXPECT_NE(render_text(p).find("out of order: 1"), std::string::npos) << render_text(p);

  // Every stamp before the previous one: no interval at all.
  std::vector<Packet> backwards;
  for (uint64_t j = 0; j < 10; ++j) backwards.push_back({kBase + (10 - j) * 1'000, 9000});
  auto back = dir.file("backwards.pcap");
  write_pcap(back, backwards, true);
  Profile b = profile_pcap(back, {});
  EXPECT_EQ(b.out_of_order, 9u);
  EXPECT_EQ(b.intervals, 0u);
  EXPECT_EQ(b.max_iat_ns, 0.0);
  for (const auto& q : b.percentiles) EXPECT_EQ(q.value_ns, 0.0) << quantile_name(q.q);
}

TEST(IatPcap, BadFilterIsAClearError) {
  TempDir dir;
  auto path = dir.file("bursts.pcap");
  write_pcap(path, burst_pattern(), true);
  PcapOptions o;
  o.filter = "udp dst port banana";
  try {
    profile_pcap(path, o);
    FAIL() << "no error";
  } catch (const PcapError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("filter 'udp dst port banana' does not parse"), std::string::npos) << m;
  }
}

TEST(IatPcap, MissingOrBadFileIsAClearError) {
  TempDir dir;
  EXPECT_THROW(profile_pcap(dir.file("nope.pcap"), {}), PcapError);
  auto junk = dir.file("junk.pcap");
  std::ofstream(junk) << "this is not a capture file at all";
  try {
    profile_pcap(junk, {});
    FAIL() << "no error";
  } catch (const PcapError& e) {
    EXPECT_NE(std::string(e.what()).find(junk), std::string::npos) << e.what();
  }
}

TEST(IatPcap, TruncatedFileIsAClearError) {
  TempDir dir;
  auto path = dir.file("bursts.pcap");
  write_pcap(path, burst_pattern(), true);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 30);
  EXPECT_THROW(profile_pcap(path, {}), PcapError);
}

}  // namespace
}  // namespace dripgate::iat
