// dripgate-dataplane with dataplane.mtu 9000 on net_pcap: jumbo frames (IPv4 UDP and TCP,
// IPv6, VLAN-tagged) mixed with standard ones go in on the client port, are classified into
// two classes by a DSCP rule, and must come out of the cluster port byte for byte, each class
// in order; jumbo frames read on the cluster port must come
// out of the client port (the reverse path) byte for byte. net_pcap receives a frame longer
// than one 2 KiB mbuf into a chain, so this runs the multi-segment path end to end: parse
// across segments, classify, queue, send chains. In the single and the split layout.
#include <pcap/pcap.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/integration/dp_harness.h"

namespace dripgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Frame = std::vector<uint8_t>;

void put16(uint8_t* p, size_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// An Ethernet frame (one 802.1Q tag when vlan != 0) carrying an IP packet of ip_len bytes:
// IPv4 (with `tos`) or IPv6, then a UDP or TCP header, then a payload that differs at every
// byte and frame.
Frame ip_frame(bool v6, uint8_t proto, size_t ip_len, uint16_t vlan, int k, uint8_t tos = 0) {
  const size_t l2 = vlan ? 18 : 14, l3 = v6 ? 40 : 20;
  Frame f(l2 + ip_len);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<uint8_t>(i * 13 + (i >> 9) + k * 7);
  const uint8_t macs[12] = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
  std::memcpy(f.data(), macs, 12);
  if (vlan) {
    put16(&f[12], 0x8100);
    put16(&f[14], vlan);
  }
  put16(&f[l2 - 2], v6 ? 0x86DD : 0x0800);
  uint8_t* ip = &f[l2];
  if (v6) {
    ip[0] = 0x60, ip[1] = 0, ip[2] = 0, ip[3] = 0;
    put16(ip + 4, ip_len - 40);
    ip[6] = proto;
    ip[7] = 64;
  } else {
    ip[0] = 0x45, ip[1] = tos;
    put16(ip + 2, ip_len);
    put16(ip + 4, static_cast<size_t>(k));
    put16(ip + 6, 0x4000);  // DF
    ip[8] = 64;
    ip[9] = proto;
    put16(ip + 10, 0);  // the dataplane checks no checksum
  }
  uint8_t* l4 = ip + l3;
  put16(l4, 40000 + static_cast<size_t>(k % 4));
  put16(l4 + 2, 8080);
  if (proto == 17) {
    put16(l4 + 4, ip_len - l3);
  } else {
    l4[12] = 5 << 4;  // TCP header of 20 bytes
  }
  return f;
}

void write_pcap(const std::string& path, const std::vector<Frame>& frames) {
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
  pcap_dumper_t* d = pcap_dump_open(dead, path.c_str());
  if (d == nullptr) throw std::runtime_error(pcap_geterr(dead));
  for (const Frame& f : frames) {
    pcap_pkthdr h{};
    h.caplen = h.len = static_cast<bpf_u_int32>(f.size());
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data());
  }
  pcap_dump_close(d);
  pcap_close(dead);
}

std::vector<Frame> read_pcap(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  if (p == nullptr) throw std::runtime_error(err);
  std::vector<Frame> out;
  pcap_pkthdr* h;
  const u_char* data;
  while (pcap_next_ex(p, &h, &data) == 1) {
    EXPECT_EQ(h->caplen, h->len) << "frame " << out.size() << " was cut";
    out.emplace_back(data, data + h->caplen);
  }
  pcap_close(p);
  return out;
}

constexpr uint8_t kGoldTos = 46 << 2;  // DSCP 46 (EF): the gold class's rule

// The frames of `frames` in the gold class (IPv4 with DSCP 46, tagged or not) or the others.
std::vector<Frame> of_class(const std::vector<Frame>& frames, bool gold) {
  std::vector<Frame> out;
  for (const Frame& f : frames) {
    const size_t l3 = f[12] == 0x81 ? 18 : 14;
    const bool is_gold = f[l3 - 2] == 0x08 && f[l3 - 1] == 0x00 && f[l3 + 1] == kGoldTos;
    if (is_gold == gold) out.push_back(f);
  }
  return out;
}

// Where two frame sequences first differ, for the failure message.
std::string first_difference(const std::vector<Frame>& got, const std::vector<Frame>& want) {
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (got[i] == want[i]) continue;
    if (got[i].size() != want[i].size())
      return fmt::format("frame {}: {} bytes instead of {}", i, got[i].size(), want[i].size());
    for (size_t b = 0; b < got[i].size(); ++b)
      if (got[i][b] != want[i][b]) return fmt::format("frame {}: byte {} differs", i, b);
  }
  return fmt::format("{} frames instead of {}", got.size(), want.size());
}

// Single: one lcore does everything. Split: the RX lcore hands chains to the drip lcore.
class DataplanePcapJumbo : public ::testing::TestWithParam<bool> {};

TEST_P(DataplanePcapJumbo, JumboFramesPassBothWaysByteForByte) {
  const bool split = GetParam();
  constexpr size_t kMtu = 9000;
  TempDir dir;
  std::vector<Frame> in, back;
  for (int k = 0; k < 40; ++k) {
    switch (k % 5) {
      case 0:
        in.push_back(ip_frame(false, 17, kMtu, 0, k));  // 9014 B: 5 segments of 2 KiB
        break;
      case 1:
        in.push_back(ip_frame(false, 6, kMtu, 0, k, kGoldTos));
        break;
      case 2:
        in.push_back(ip_frame(true, 17, kMtu, 0, k));
        break;
      case 3:
        in.push_back(ip_frame(false, 17, kMtu, 7, k, kGoldTos));  // 9018 B with its tag
        break;
      default:  // standard frames between them: one segment, the inline parser's
        in.push_back(ip_frame(false, 17, 1500, 0, k));
        in.push_back(ip_frame(false, 17, 100, 0, k, kGoldTos));
    }
    back.push_back(ip_frame(k % 2 == 1, 17, k % 3 == 0 ? kMtu : 2100 + k, 0, 1000 + k));
  }
  uint64_t in_bytes = 0;
  for (const Frame& f : in) in_bytes += f.size();
  const std::string sock = dir.file("dp.sock");
  write_pcap(dir.file("in.pcap"), in);
  write_pcap(dir.file("back.pcap"), back);
  std::vector<std::string> eal = test_eal_args();
  if (split) {  // three lcores on two CPUs: the main lcore sleeps in poll()
    eal[0] = "--lcores";
    eal[1] = "0@0,1@0,2@1";
  }
  eal.push_back(fmt::format("--vdev=net_pcap0,rx_pcap={},tx_pcap={}", dir.file("in.pcap"),
                            dir.file("client_tx.pcap")));
  eal.push_back(fmt::format("--vdev=net_pcap1,rx_pcap={},tx_pcap={}", dir.file("back.pcap"),
                            dir.file("out.pcap")));
  {
    std::ofstream y(dir.file("dp.yaml"));
    y << "dataplane:\n"
      << "  eal: " << json(eal).dump() << "\n"
      << "  ports: { client: 0, cluster: 1 }\n"
      << "  lcores: " << (split ? "{ rx: 1, drip: 2 }" : "{ rx: 1, drip: 1 }") << "\n"
      << "  mbufs: 8191\n"
      << "  mtu: " << kMtu << "\n"
      << "  drip: { rate_pps: 20000, rate_bps: 0, batch: 1, max_catchup: 64 }\n"
      << "  classes:\n"
      // One FIFO per class (fairness: none): each class's frames, of several flows, leave in
      // the order they came, which the comparison below needs; a fair class orders them by
      // source.
      << "    gold:    { weight: 4, rate_pps: 0, queue_depth: 4096, ttl_ms: 60000, fairness: none "
         "}\n"
      << "    default: { weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 60000, fairness: none "
         "}\n"
      << "  classify:\n"
      << "    - { dscp: 46, class: gold }\n"
      << "  unknown_flows: default\n"
      << "  control_socket: " << sock << "\n";
  }
  Process dp({dataplane_binary(), "--config", dir.file("dp.yaml"), "--drain-ms", "5000"},
             dir.file("stdout"), dir.file("stderr"));
  {
    ControlClient cc(sock, 30s);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    for (;;) {
      const json a = cc.call({{"op", "stats"}});
      ASSERT_TRUE(a.at("ok").get<bool>()) << a.dump();
      const json& st = a.at("stats");
      if (st.at("departures").get<size_t>() + st.at("drops").at("malformed").get<size_t>() >=
              in.size() &&
          st.at("tx").at("reverse").get<size_t>() >= back.size())
        break;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << a.dump();
      std::this_thread::sleep_for(20ms);
    }
  }
  ASSERT_EQ(dp.terminate(30s), 0) << read_file(dir.file("stderr"));
  const json fin = last_json_line(dir.file("stdout"));
  ASSERT_TRUE(fin.is_object()) << read_file(dir.file("stdout"));
  EXPECT_EQ(fin.at("drops").at("malformed").get<uint64_t>(), 0u) << fin.dump();
  EXPECT_EQ(accounted(fin), in.size()) << fin.dump();
  EXPECT_EQ(fin.at("tx").at("shaped").get<uint64_t>(), in.size()) << fin.dump();
  EXPECT_EQ(fin.at("tx").at("shaped_bytes").get<uint64_t>(), in_bytes) << fin.dump();
  EXPECT_EQ(fin.at("tx").at("reverse").get<uint64_t>(), back.size()) << fin.dump();
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());
  // Chains of 2 KiB mbufs, not mbufs sized for 9 KiB frames: the path under test.
  EXPECT_NE(read_file(dir.file("stderr")).find("mbufs of 2048 B, longer frames chained"),
            std::string::npos)
      << read_file(dir.file("stderr"));

  const std::vector<Frame> out = read_pcap(dir.file("out.pcap"));
  // Each class in its own order (the classes share the port, so they may interleave otherwise).
  for (const bool gold : {true, false}) {
    const std::vector<Frame> got = of_class(out, gold), want = of_class(in, gold);
    EXPECT_TRUE(got == want) << (gold ? "gold: " : "default: ") << first_difference(got, want);
  }
  EXPECT_EQ(fin.at("classes").at("gold").at("tx_pkts").get<size_t>(), of_class(in, true).size());
  const std::vector<Frame> client_tx = read_pcap(dir.file("client_tx.pcap"));
  EXPECT_TRUE(client_tx == back) << first_difference(client_tx, back);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataplanePcapJumbo, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "split" : "single"; });

}  // namespace
}  // namespace dripgate::testing
