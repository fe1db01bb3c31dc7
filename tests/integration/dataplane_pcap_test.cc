// dripgate-dataplane end to end on net_pcap: a bursty input pcap (two classes, malformed frames,
// ARP) goes in on the client port; the cluster port writes what it sends to out.pcap. Checks
// that every packet is accounted for, classes are separated and share the port by weight, each
// class keeps its order, the mean departure interval matches the configured rate, and every
// mbuf is back in the pool after the drain. Runs in each lcore layout: single, split, and RSS
// (two RX lcores, each with its own RX queue of the client port, one drip lcore).
#include <arpa/inet.h>
#include <pcap/pcap.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/prom_text.h"
#include "dataplane/parse.h"
#include "tests/http_client.h"
#include "tests/integration/dp_harness.h"

namespace dripgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr int kBursts = 4;
constexpr int kPerBurst = 500;  // per class and burst
constexpr int kShaped = 2 * kBursts * kPerBurst;
constexpr int kMalformedEach = 10;  // of each of three kinds
constexpr int kArp = 20;
constexpr double kRatePps = 10000;
constexpr uint32_t kFrameLen = 128;

uint16_t ip_checksum(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// Ethernet + IPv4 + UDP, kFrameLen bytes; payload "DGT" + class + big-endian sequence number.
std::vector<uint8_t> udp_frame(uint8_t src_net, uint8_t cls, uint32_t seq) {
  std::vector<uint8_t> f(kFrameLen, 0);
  const uint8_t dmac[6] = {0x02, 0, 0, 0, 0, 2}, smac[6] = {0x02, 0, 0, 0, 0, 1};
  std::memcpy(&f[0], dmac, 6);
  std::memcpy(&f[6], smac, 6);
  f[12] = 0x08;
  f[13] = 0x00;
  uint8_t* ip = &f[14];
  const uint16_t total = kFrameLen - 14;
  ip[0] = 0x45;
  ip[2] = total >> 8;
  ip[3] = total & 0xff;
  ip[8] = 64;
  ip[9] = 17;
  const uint8_t src[4] = {10, src_net, 0, 7}, dst[4] = {10, 9, 0, 1};
  std::memcpy(ip + 12, src, 4);
  std::memcpy(ip + 16, dst, 4);
  uint16_t c = ip_checksum(ip, 20);
  ip[10] = c >> 8;
  ip[11] = c & 0xff;
  uint8_t* udp = ip + 20;
  udp[0] = 0x9c;
  udp[1] = 0x40;  // 40000
  udp[2] = 0x1f;
  udp[3] = 0x90;  // 8080
  udp[4] = (total - 20) >> 8;
  udp[5] = (total - 20) & 0xff;
  uint8_t* pl = udp + 8;
  pl[0] = 'D';
  pl[1] = 'G';
  pl[2] = 'T';
  pl[3] = cls;
  pl[4] = static_cast<uint8_t>(seq >> 24);
  pl[5] = static_cast<uint8_t>(seq >> 16);
  pl[6] = static_cast<uint8_t>(seq >> 8);
  pl[7] = static_cast<uint8_t>(seq);
  return f;
}

std::vector<uint8_t> arp_frame(uint8_t i) {
  std::vector<uint8_t> f(60, 0);
  std::memset(&f[0], 0xff, 6);
  f[6] = 0x02;
  f[11] = i;
  f[12] = 0x08;
  f[13] = 0x06;
  f[14] = 0;
  f[15] = 1;  // htype ethernet
  f[16] = 0x08;
  f[17] = 0;  // ptype IPv4
  f[18] = 6;
  f[19] = 4;
  f[21] = 1;  // request
  return f;
}

// kind 0: IHL 3; kind 1: IPv4 cut after 10 bytes; kind 2: UDP header cut (total length 24).
std::vector<uint8_t> malformed_frame(int kind) {
  std::vector<uint8_t> f = udp_frame(1, 0, 0);
  switch (kind) {
    case 0:
      f[14] = 0x43;
      break;
    case 1:
      f.resize(14 + 10);
      break;
    default:
      f[16] = 0;
      f[17] = 24;
      f.resize(60);
      break;
  }
  return f;
}

struct Written {
  int total = 0;
};

// interleave: within each burst gold and default alternate packet by packet (so every received
// burst holds both classes) instead of coming as two blocks.
Written write_input(const std::string& path, bool interleave = false) {
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
  pcap_dumper_t* d = pcap_dump_open(dead, path.c_str());
  if (d == nullptr) throw std::runtime_error(pcap_geterr(dead));
  Written w;
  auto put = [&](const std::vector<uint8_t>& f) {
    pcap_pkthdr h{};
    h.ts.tv_sec = 1700000000;
    h.ts.tv_usec = w.total;
    h.caplen = h.len = static_cast<bpf_u_int32>(f.size());
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data());
    ++w.total;
  };
  uint32_t seq_gold = 0, seq_default = 0;
  for (int b = 0; b < kBursts; ++b) {
    if (interleave) {
      for (int i = 0; i < kPerBurst; ++i) {
        put(udp_frame(1, 'g', seq_gold++));
        put(udp_frame(2, 'd', seq_default++));
      }
      for (int i = 0; i < kArp / kBursts; ++i) put(arp_frame(static_cast<uint8_t>(b * 10 + i)));
    } else {
      for (int i = 0; i < kPerBurst; ++i) put(udp_frame(1, 'g', seq_gold++));  // 10.1/16: gold
      for (int i = 0; i < kArp / kBursts; ++i) put(arp_frame(static_cast<uint8_t>(b * 10 + i)));
      for (int i = 0; i < kPerBurst; ++i) put(udp_frame(2, 'd', seq_default++));  // default
    }
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < kMalformedEach / kBursts + (b < kMalformedEach % kBursts); ++i)
        put(malformed_frame(k));
  }
  pcap_dump_close(d);
  pcap_close(dead);
  return w;
}

struct OutPacket {
  uint64_t ts_ns;
  bool ip;
  char cls;  // 'g', 'd', or 0
  uint32_t seq;
};

std::vector<OutPacket> read_output(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p =
      pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  if (p == nullptr) throw std::runtime_error(err);
  std::vector<OutPacket> out;
  pcap_pkthdr* h;
  const u_char* data;
  while (pcap_next_ex(p, &h, &data) == 1) {
    OutPacket o{static_cast<uint64_t>(h->ts.tv_sec) * 1000000000ULL + h->ts.tv_usec, false, 0, 0};
    if (h->caplen >= 14 + 20 + 8 + 8 && data[12] == 0x08 && data[13] == 0x00) {
      o.ip = true;
      const u_char* pl = data + 14 + 20 + 8;
      if (pl[0] == 'D' && pl[1] == 'G' && pl[2] == 'T') {
        o.cls = static_cast<char>(pl[3]);
        o.seq = static_cast<uint32_t>(pl[4]) << 24 | static_cast<uint32_t>(pl[5]) << 16 |
                static_cast<uint32_t>(pl[6]) << 8 | pl[7];
      }
    }
    out.push_back(o);
  }
  pcap_close(p);
  return out;
}

uint64_t u(const json& j, const char* a, const char* b) {
  return j.at(a).at(b).get<uint64_t>();
}

enum class Layout { kSingle, kSplit, kRss };

// RSS: the frames of `in` on two RX queues, as a NIC's RSS would spread them (by flow): gold
// flows and ARP in in0, the default flows and the malformed frames in in1. Each class keeps its
// order within its queue.
void split_input(const std::string& in, const std::string& in0, const std::string& in1) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(in.c_str(), err);
  if (p == nullptr) throw std::runtime_error(err);
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
  pcap_dumper_t* d0 = pcap_dump_open(dead, in0.c_str());
  pcap_dumper_t* d1 = pcap_dump_open(dead, in1.c_str());
  if (d0 == nullptr || d1 == nullptr) throw std::runtime_error(pcap_geterr(dead));
  pcap_pkthdr* h;
  const u_char* data;
  while (pcap_next_ex(p, &h, &data) == 1) {
    const bool arp = h->caplen >= 14 && data[12] == 0x08 && data[13] == 0x06;
    const bool gold = h->caplen >= 14 + 20 + 8 + 4 && data[12] == 0x08 && data[13] == 0x00 &&
                      (data[14] & 0x0f) == 5 && data[14 + 20 + 8 + 3] == 'g';
    pcap_dump(reinterpret_cast<u_char*>(arp || gold ? d0 : d1), h, data);
  }
  pcap_dump_close(d0);
  pcap_dump_close(d1);
  pcap_close(dead);
  pcap_close(p);
}

// EAL arguments for net_pcap ports: the client port reads `in`, the cluster port writes `out`.
// split: three lcores on a 2-CPU box (the main lcore sleeps in poll(), so it can share a CPU).
// RSS: four, the two RX lcores sharing a CPU; the client port reads in.pcap's two halves on two
// RX queues and has a TX queue per RX lcore; the cluster port has two (empty) RX queues.
std::vector<std::string> pcap_eal(const TempDir& dir, const std::string& in, const std::string& out,
                                  Layout layout) {
  std::vector<std::string> eal = test_eal_args();
  if (layout != Layout::kSingle) {
    eal[0] = "--lcores";
    eal[1] = layout == Layout::kSplit ? "0@0,1@0,2@1" : "0@0,1@0,2@1,3@0";
  }
  if (layout == Layout::kRss) {
    const std::string in0 = dir.file("in0.pcap"), in1 = dir.file("in1.pcap");
    const std::string none = dir.file("none.pcap");
    split_input(in, in0, in1);
    pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
    pcap_dump_close(pcap_dump_open(dead, none.c_str()));
    pcap_close(dead);
    eal.push_back(fmt::format("--vdev=net_pcap0,rx_pcap={},rx_pcap={},tx_pcap={},tx_pcap={}", in0,
                              in1, dir.file("client_tx0.pcap"), dir.file("client_tx1.pcap")));
    eal.push_back(
        fmt::format("--vdev=net_pcap1,rx_pcap={},rx_pcap={},tx_pcap={}", none, none, out));
    return eal;
  }
  eal.push_back(
      fmt::format("--vdev=net_pcap0,rx_pcap={},tx_pcap={}", in, dir.file("client_tx.pcap")));
  eal.push_back(fmt::format("--vdev=net_pcap1,tx_pcap={}", out));
  return eal;
}

const char* lcores_yaml(Layout layout) {
  switch (layout) {
    case Layout::kSingle:
      return "{ rx: 1, drip: 1 }";
    case Layout::kSplit:
      return "{ rx: 1, drip: 2 }";
    case Layout::kRss:
      return "{ rx: [1, 3], drip: 2 }";
  }
  return "";
}

// The dataplane YAML of these tests: two classes (gold for 10.1/16, default for the rest);
// `drip` and `classes` are the flow-style bodies of those two keys.
void write_yaml(const TempDir& dir, const std::vector<std::string>& eal, Layout layout,
                const std::string& drip, const std::string& gold, const std::string& def) {
  std::ofstream y(dir.file("dp.yaml"));
  y << "dataplane:\n"
    << "  eal: " << json(eal).dump() << "\n"
    << "  ports: { client: 0, cluster: 1 }\n"
    << "  lcores: " << lcores_yaml(layout) << "\n"
    << "  mbufs: 8191\n"
    << "  drip: { " << drip << " }\n"
    << "  classes:\n"
    << "    gold:    { " << gold << " }\n"
    << "    default: { " << def << " }\n"
    << "  classify:\n"
    << "    - { src: \"10.1.0.0/16\", class: gold }\n"
    << "  unknown_flows: default\n"
    << "  control_socket: " << dir.file("dp.sock") << "\n";
}

// Polls the control socket's stats until done(stats) or a minute has passed (a test failure).
template <typename Done>
void wait_for_stats(const std::string& sock, Done&& done) {
  ControlClient cc(sock, 30s);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    json a = cc.call({{"op", "stats"}});
    ASSERT_TRUE(a.at("ok").get<bool>()) << a.dump();
    if (done(a.at("stats"))) return;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << a.dump();
    std::this_thread::sleep_for(20ms);
  }
}

class DataplanePcap : public ::testing::TestWithParam<Layout> {};

TEST_P(DataplanePcap, BurstyInputIsDrippedAndAccountedFor) {
  const Layout layout = GetParam();
  TempDir dir;
  const std::string in = dir.file("in.pcap"), out = dir.file("out.pcap");
  const Written w = write_input(in);
  const int n_malformed = 3 * kMalformedEach;
  ASSERT_EQ(w.total, kShaped + kArp + n_malformed);

  // The port starts at 1 pps, so the whole input is queued before the test turns the rate
  // up over the control socket (which must keep every queued packet): on a loaded 2-core
  // box an RX lcore that is preempted would otherwise let the queue run dry, and idle time
  // is (rightly) not made up. The catch-up of up to 100 ms keeps the long-run rate when the
  // drip lcore itself is preempted; pacing precision is the benchmark's job.
  write_yaml(dir, pcap_eal(dir, in, out, layout), layout,
             "rate_pps: 1, rate_bps: 0, batch: 1, max_catchup: 1000",
             "weight: 3, rate_pps: 0, queue_depth: 4096, ttl_ms: 60000",
             "weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 60000");
  const std::string sock = dir.file("dp.sock");
  Process dp({dataplane_binary(), "--config", dir.file("dp.yaml"), "--drain-ms", "5000"},
             dir.file("stdout"), dir.file("stderr"));
  json stats;
  size_t before_change = 0;  // departures made at the initial 1 pps
  {
    ControlClient cc(sock, 30s);
    auto deadline = std::chrono::steady_clock::now() + 60s;
    bool rate_set = false;
    for (;;) {
      json a = cc.call({{"op", "stats"}});
      ASSERT_TRUE(a.at("ok").get<bool>()) << a.dump();
      stats = a.at("stats");
      if (!rate_set && stats.at("rx").at("client").get<int>() == w.total &&
          stats.at("queue_len").get<int>() + stats.at("departures").get<int>() == kShaped) {
        before_change = stats.at("departures").get<size_t>();
        json r = cc.call({{"op", "set_rate"}, {"class", "port"}, {"rate_pps", kRatePps}});
        ASSERT_TRUE(r.at("ok").get<bool>()) << r.dump();
        rate_set = true;
        continue;
      }
      if (rate_set && stats.at("departures").get<int>() >= kShaped &&
          stats.at("queue_len").get<int>() == 0)
        break;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << "dataplane did not send everything in time: " << stats.dump();
      std::this_thread::sleep_for(50ms);
    }
  }
  // DPDK telemetry serves our counters beside the standard ones (the runtime dir exists with
  // --no-shconf too).
  const std::string tel = run_command(fmt::format(
      "printf '/dripgate/stats\\n/dripgate/classes,gold\\n' | dpdk-telemetry.py -f dg{} 2>&1",
      ::getpid()));
  bool saw_stats = false, saw_gold = false;
  {
    std::istringstream lines(tel);
    for (std::string line; std::getline(lines, line);) {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;
      if (j.contains("/dripgate/stats")) {
        saw_stats = true;
        EXPECT_EQ(j["/dripgate/stats"].at("rx_client").get<int>(), w.total) << line;
        EXPECT_EQ(j["/dripgate/stats"].at("tx_shaped").get<int>(), kShaped) << line;
      }
      if (j.contains("/dripgate/classes")) {
        saw_gold = true;
        EXPECT_EQ(j["/dripgate/classes"].at("tx_pkts").get<int>(), kShaped / 2) << line;
      }
    }
  }
  EXPECT_TRUE(saw_stats && saw_gold) << "dpdk-telemetry.py said:\n" << tel;

  ASSERT_EQ(dp.terminate(30s), 0) << read_file(dir.file("stderr"));
  const json fin = last_json_line(dir.file("stdout"));
  ASSERT_TRUE(fin.is_object()) << read_file(dir.file("stdout"));

  // Every input packet is accounted for, and nothing was dropped that should not have been.
  const uint64_t rx = u(fin, "rx", "client");
  EXPECT_EQ(rx, static_cast<uint64_t>(w.total));
  const json& d = fin.at("drops");
  EXPECT_EQ(accounted(fin), rx) << fin.dump();
  EXPECT_EQ(u(fin, "tx", "shaped"), static_cast<uint64_t>(kShaped));
  EXPECT_EQ(u(fin, "tx", "pass_non_ip"), static_cast<uint64_t>(kArp));
  EXPECT_EQ(d.at("malformed").get<int>(), n_malformed);
  const json& causes = d.at("malformed_by_cause");
  EXPECT_EQ(causes.at(dataplane::to_string(dataplane::ParseStatus::kBadIhl)).get<int>(),
            kMalformedEach);
  EXPECT_EQ(causes.at(dataplane::to_string(dataplane::ParseStatus::kTruncatedIpv4)).get<int>(),
            kMalformedEach);
  EXPECT_EQ(causes.at(dataplane::to_string(dataplane::ParseStatus::kTruncatedL4)).get<int>(),
            kMalformedEach);
  EXPECT_EQ(fin.at("classes").at("gold").at("tx_pkts").get<int>(), kShaped / 2);
  EXPECT_EQ(fin.at("classes").at("default").at("tx_pkts").get<int>(), kShaped / 2);
  EXPECT_EQ(fin.at("departure_error").at("count").get<int>(), kShaped);
  EXPECT_EQ(fin.at("rate_updates").get<int>(), 1);
  EXPECT_EQ(fin.at("port_rate_pps").get<double>(), kRatePps);
  // No leak: after the drain and port close every mbuf is back in the pool.
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());
  if (layout == Layout::kRss) {
    // Each RX lcore read its own queue: gold and ARP on the first, the rest on the second.
    const json& per = fin.at("rx").at("per_lcore");
    ASSERT_EQ(per.size(), 2u) << fin.dump();
    EXPECT_EQ(per[0].at("client").get<int>(), kShaped / 2 + kArp) << fin.dump();
    EXPECT_EQ(per[1].at("client").get<int>(), kShaped / 2 + n_malformed) << fin.dump();
  } else {
    EXPECT_FALSE(fin.at("rx").contains("per_lcore")) << fin.dump();
  }

  // What the cluster port really sent.
  const std::vector<OutPacket> pk = read_output(out);
  EXPECT_EQ(pk.size(), static_cast<size_t>(kShaped + kArp));
  std::vector<const OutPacket*> shaped;
  std::map<char, int64_t> last_seq{{'g', -1}, {'d', -1}};
  int arp = 0;
  for (const auto& p : pk) {
    if (!p.ip) {
      ++arp;
      continue;
    }
    ASSERT_TRUE(p.cls == 'g' || p.cls == 'd') << "a packet that was not in the input";
    // Per-class order is kept: sequence numbers strictly increase, none missing.
    EXPECT_EQ(static_cast<int64_t>(p.seq), last_seq[p.cls] + 1) << "class " << p.cls;
    last_seq[p.cls] = p.seq;
    shaped.push_back(&p);
  }
  EXPECT_EQ(arp, kArp);
  ASSERT_EQ(shaped.size(), static_cast<size_t>(kShaped));
  // Weighted sharing while both classes are backlogged: 3:1 over the first half.
  int gold_first = 0;
  for (int i = 0; i < kShaped / 2; ++i) gold_first += shaped[static_cast<size_t>(i)]->cls == 'g';
  const double share = static_cast<double>(gold_first) / (kShaped / 2);
  EXPECT_NEAR(share, 0.75, 0.02);
  // The drip: mean departure interval within 2% of 1 / rate (net_pcap stamps at TX time).
  // Measured from the first departure after the rate change.
  const size_t first = before_change;
  ASSERT_LT(first, 5u) << "more than a few departures at the initial 1 pps";
  // The mean interval over half the run, (t[i+h] - t[i]) / h, taken at the median start i: on
  // a loaded box a few departures leave late after a preemption (and catch up), and the span
  // from the very first to the very last packet would count the lateness of the last one as
  // if the rate were lower. Most spans start and end on time, so the median is the true rate.
  const size_t n = shaped.size() - first, h = n / 2;
  std::vector<double> spans;
  for (size_t i = first; i + h < shaped.size(); ++i)
    spans.push_back(static_cast<double>(shaped[i + h]->ts_ns - shaped[i]->ts_ns) /
                    static_cast<double>(h));
  std::nth_element(spans.begin(), spans.begin() + spans.size() / 2, spans.end());
  const double mean_ns = spans[spans.size() / 2];
  const double naive_ns =
      static_cast<double>(shaped.back()->ts_ns - shaped[first]->ts_ns) / static_cast<double>(n - 1);
  const double want_ns = 1e9 / kRatePps;
  EXPECT_NEAR(mean_ns, want_ns, 0.02 * want_ns);
  RecordProperty("mean_interval_ns", std::to_string(mean_ns));
  std::printf(
      "layout %d: mean departure interval %.1f ns (first to last: %.1f ns; configured %.1f ns), "
      "gold share %.4f\n",
      static_cast<int>(layout), mean_ns, naive_ns, want_ns, share);
}

// The interleaved input through an unlimited port, gold unlimited and default as given, until
// every shaped packet has left; *fin is the final stats line, checked to account for every
// frame written. The output is dir's out.pcap.
void run_unlimited_port(TempDir& dir, Layout layout, const std::string& default_class, json* fin) {
  const std::string in = dir.file("in.pcap"), out = dir.file("out.pcap");
  const Written w = write_input(in, /*interleave=*/true);
  write_yaml(dir, pcap_eal(dir, in, out, layout), layout,
             "rate_pps: 0, rate_bps: 0, batch: 32, max_catchup: 1000",
             "weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 60000", default_class);
  Process dp({dataplane_binary(), "--config", dir.file("dp.yaml"), "--drain-ms", "5000"},
             dir.file("stdout"), dir.file("stderr"));
  wait_for_stats(dir.file("dp.sock"), [](const json& st) {
    return st.at("departures").get<int>() >= kShaped && st.at("queue_len").get<int>() == 0;
  });
  ASSERT_EQ(dp.terminate(30s), 0) << read_file(dir.file("stderr"));
  *fin = last_json_line(dir.file("stdout"));
  ASSERT_TRUE(fin->is_object()) << read_file(dir.file("stdout"));
  EXPECT_EQ(accounted(*fin), static_cast<uint64_t>(w.total)) << fin->dump();
}

// An unlimited port: the uncapped class leaves as it arrives (the empty-queue bypass), the
// capped one on its own timeline, and the books balance the same way as when everything queues.
// The classes alternate packet by packet, so each received burst is split between the two.
TEST_P(DataplanePcap, UnlimitedPortSendsUncappedClassAtOnceAndCappedOneOnItsTimeline) {
  constexpr double kCapPps = 5000;
  TempDir dir;
  json fin;
  run_unlimited_port(
      dir, GetParam(),
      fmt::format("weight: 1, rate_pps: {}, queue_depth: 4096, ttl_ms: 60000", kCapPps), &fin);
  if (HasFatalFailure()) return;
  const std::string out = dir.file("out.pcap");
  EXPECT_EQ(u(fin, "tx", "shaped"), static_cast<uint64_t>(kShaped)) << fin.dump();
  for (const char* c : {"gold", "default"}) {
    const json& cj = fin.at("classes").at(c);
    EXPECT_EQ(cj.at("classified").get<int>(), kShaped / 2) << c;
    EXPECT_EQ(cj.at("tx_pkts").get<int>(), kShaped / 2) << c;
  }
  EXPECT_EQ(fin.at("departure_error").at("count").get<int>(), kShaped);
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());

  const std::vector<OutPacket> pk = read_output(out);
  std::map<char, int64_t> last_seq{{'g', -1}, {'d', -1}};
  std::vector<uint64_t> default_ts;
  uint64_t last_gold_ts = 0;
  for (const auto& p : pk) {
    if (!p.ip) continue;
    EXPECT_EQ(static_cast<int64_t>(p.seq), last_seq[p.cls] + 1) << "class " << p.cls;
    last_seq[p.cls] = p.seq;
    if (p.cls == 'd') default_ts.push_back(p.ts_ns);
    if (p.cls == 'g') last_gold_ts = p.ts_ns;
  }
  ASSERT_EQ(default_ts.size(), static_cast<size_t>(kShaped / 2));
  // Gold is not held behind the capped class: all of it has left before default, at 5 kpps, is
  // a fifth of the way through (200 ms; the whole input is read in a few ms).
  EXPECT_LT(last_gold_ts, default_ts[kShaped / 2 / 5]);
  // Default keeps its cap: the median interval over half-run spans (as above) within 2%.
  const size_t h = default_ts.size() / 2;
  std::vector<double> spans;
  for (size_t i = 0; i + h < default_ts.size(); ++i)
    spans.push_back(static_cast<double>(default_ts[i + h] - default_ts[i]) /
                    static_cast<double>(h));
  std::nth_element(spans.begin(), spans.begin() + spans.size() / 2, spans.end());
  EXPECT_NEAR(spans[spans.size() / 2], 1e9 / kCapPps, 0.02 * 1e9 / kCapPps);
}

// Two unlimited classes alternating packet by packet, on an unlimited port: a received burst
// of IP frames leaves as it came, each class booked at once for its share; every class's
// packets and bytes are counted to it, and each class leaves in its own order.
TEST_P(DataplanePcap, TwoUnlimitedClassesAreSentAtOnceAndCountedApart) {
  TempDir dir;
  json fin;
  run_unlimited_port(dir, GetParam(), "weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 60000",
                     &fin);
  if (HasFatalFailure()) return;
  const std::string out = dir.file("out.pcap");
  EXPECT_EQ(u(fin, "tx", "shaped"), static_cast<uint64_t>(kShaped)) << fin.dump();
  EXPECT_EQ(u(fin, "tx", "shaped_bytes"), static_cast<uint64_t>(kShaped) * kFrameLen);
  for (const char* c : {"gold", "default"}) {
    const json& cj = fin.at("classes").at(c);
    EXPECT_EQ(cj.at("classified").get<int>(), kShaped / 2) << c;
    EXPECT_EQ(cj.at("tx_pkts").get<int>(), kShaped / 2) << c;
    EXPECT_EQ(cj.at("tx_bytes").get<uint64_t>(), uint64_t{kShaped / 2} * kFrameLen) << c;
  }
  EXPECT_EQ(fin.at("departure_error").at("count").get<int>(), kShaped);
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());
  std::map<char, int64_t> last_seq{{'g', -1}, {'d', -1}};
  std::map<char, int> sent{{'g', 0}, {'d', 0}};
  for (const auto& p : read_output(out)) {
    if (!p.ip) continue;
    EXPECT_EQ(static_cast<int64_t>(p.seq), last_seq[p.cls] + 1) << "class " << p.cls;
    last_seq[p.cls] = p.seq;
    ++sent[p.cls];
  }
  EXPECT_EQ(sent['g'], kShaped / 2);
  EXPECT_EQ(sent['d'], kShaped / 2);
}

// Drops of every cause are counted, and the books still balance: a shallow queue (depth), a
// short TTL (ttl), and a stop with no drain time (shutdown); every mbuf is back afterwards.
TEST(DataplanePcapDrops, DepthTtlAndShutdownDropsAreCounted) {
  TempDir dir;
  const std::string in = dir.file("in.pcap"), out = dir.file("out.pcap");
  const Written w = write_input(in);
  write_yaml(dir, pcap_eal(dir, in, out, Layout::kSingle), Layout::kSingle,
             "rate_pps: 1000, rate_bps: 0, batch: 1, max_catchup: 8",
             "weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 100",
             "weight: 1, rate_pps: 0, queue_depth: 1500, ttl_ms: 60000");
  Process dp({dataplane_binary(), "--config", dir.file("dp.yaml"), "--drain-ms", "0"},
             dir.file("stdout"), dir.file("stderr"));
  wait_for_stats(dir.file("dp.sock"),
                 [&](const json& st) { return st.at("rx").at("client").get<int>() == w.total; });
  std::this_thread::sleep_for(300ms);  // gold's heads outlive their 100 ms meanwhile
  ASSERT_EQ(dp.terminate(30s), 0) << read_file(dir.file("stderr"));
  const json fin = last_json_line(dir.file("stdout"));
  ASSERT_TRUE(fin.is_object()) << read_file(dir.file("stdout"));
  const json& d = fin.at("drops");
  const json& gold = fin.at("classes").at("gold");
  const json& def = fin.at("classes").at("default");
  EXPECT_GT(def.at("drops").at("depth").get<int>(), 0) << fin.dump();
  EXPECT_GT(gold.at("drops").at("ttl").get<int>(), 0) << fin.dump();
  EXPECT_GT(d.at("shutdown").get<int>(), 0) << fin.dump();
  for (const json* c : {&gold, &def}) {
    // Per class: classified = sent + every drop; nothing left queued after the stop.
    const json& cd = c->at("drops");
    EXPECT_EQ(c->at("classified").get<uint64_t>(),
              c->at("tx_pkts").get<uint64_t>() + cd.at("depth").get<uint64_t>() +
                  cd.at("ttl").get<uint64_t>() + cd.at("tx_full").get<uint64_t>() +
                  cd.at("shutdown").get<uint64_t>())
        << c->dump();
    EXPECT_EQ(c->at("queue_len").get<int>(), 0);
  }
  EXPECT_EQ(accounted(fin), static_cast<uint64_t>(w.total)) << fin.dump();
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());
  // What left is what the counters say, each class in order (with gaps where drops were).
  const std::vector<OutPacket> pk = read_output(out);
  EXPECT_EQ(pk.size(), u(fin, "tx", "shaped") + u(fin, "tx", "pass_sent"));
  std::map<char, int64_t> last{{'g', -1}, {'d', -1}};
  for (const auto& p : pk) {
    if (!p.ip) continue;
    EXPECT_GT(static_cast<int64_t>(p.seq), last[p.cls]);
    last[p.cls] = p.seq;
  }
}

// One series of a scrape, summed over the series the selector matches (-1 when none does).
double scraped(const std::string& body, const std::string& selector) {
  auto sel = common::parse_prom_selector(selector);
  if (!sel) return -2;
  const common::PromReading r = common::read_prom_metric(body, *sel, common::PromAggregate::kSum);
  return r.status == common::PromReading::Status::kOk ? r.value : -1;
}

// GET /metrics on the main lcore while the dataplane runs: once the input is through and the
// queues are empty, every figure the scrape shows is the one the stats show over the control
// socket; each family has HELP and TYPE; the lateness histogram is cumulative up to its count.
TEST(DataplanePcapMetrics, MetricsOnTheMainLcoreMatchTheStats) {
  TempDir dir;
  const std::string in = dir.file("in.pcap"), out = dir.file("out.pcap");
  const Written w = write_input(in);
  write_yaml(dir, pcap_eal(dir, in, out, Layout::kSingle), Layout::kSingle,
             "rate_pps: 2000, rate_bps: 0, batch: 1, max_catchup: 8",
             "weight: 1, rate_pps: 0, queue_depth: 200, ttl_ms: 60000",
             "weight: 1, rate_pps: 0, queue_depth: 4096, ttl_ms: 60000");
  std::ofstream(dir.file("dp.yaml"), std::ios::app) << "  metrics_listen: \"127.0.0.1:0\"\n";
  Process dp({dataplane_binary(), "--config", dir.file("dp.yaml"), "--drain-ms", "0"},
             dir.file("stdout"), dir.file("stderr"));
  ControlClient cc(dir.file("dp.sock"), 30s);
  const json tagged = cc.call(
      {{"op", "tag"},
       {"flow",
        {{"src", "10.9.0.1"}, {"sport", 1}, {"dst", "10.9.0.2"}, {"dport", 2}, {"proto", 17}}},
       {"class", "gold"},
       {"tenant", "acme"}});
  ASSERT_TRUE(tagged.at("ok").get<bool>()) << tagged.dump();
  EXPECT_FALSE(cc.call({{"op", "tag"}, {"flow", {{"src", "10.9.0.1"}}}, {"class", "platinum"}})
                   .at("ok")
                   .get<bool>());
  json st;
  wait_for_stats(dir.file("dp.sock"), [&](const json& s) {
    st = s;
    return s.at("rx").at("client").get<int>() == w.total && s.at("queue_len").get<int>() == 0;
  });
  std::this_thread::sleep_for(100ms);  // the last departures' counters
  const json a = cc.call({{"op", "stats"}});
  st = a.at("stats");
  const std::string log = read_file(dir.file("stderr"));
  const size_t at = log.find("(port ");
  ASSERT_NE(at, std::string::npos) << log;
  const int port = std::stoi(log.substr(at + 6));
  const HttpResponse r = http(port, "GET", "/metrics");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& m = r.body;
  const json& gold = st.at("classes").at("gold");
  const json& def = st.at("classes").at("default");
  EXPECT_EQ(scraped(m, "dripgate_dataplane_received_packets_total{port=\"client\"}"), w.total);
  for (const auto& [name, c] : {std::pair{"gold", &gold}, std::pair{"default", &def}}) {
    const std::string cls = std::string("class=\"") + name + "\"";
    EXPECT_EQ(scraped(m, "dripgate_dataplane_sent_packets_total{" + cls + ",port=\"cluster\"}"),
              c->at("tx_pkts").get<double>());
    EXPECT_EQ(scraped(m, "dripgate_dataplane_sent_bytes_total{" + cls + "}"),
              c->at("tx_bytes").get<double>());
    EXPECT_EQ(scraped(m, "dripgate_dataplane_drops_total{" + cls + ",cause=\"depth\"}"),
              c->at("drops").at("depth").get<double>());
    EXPECT_EQ(scraped(m, "dripgate_dataplane_queue_depth_packets{" + cls + "}"), 0);
  }
  EXPECT_GT(gold.at("drops").at("depth").get<int>(), 0) << gold.dump();
  EXPECT_EQ(scraped(m, "dripgate_dataplane_queue_limit_packets{class=\"gold\"}"), 200);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_sent_packets_total{port=\"cluster\"}"),
            st.at("tx").at("shaped").get<double>() + st.at("tx").at("pass_sent").get<double>());
  EXPECT_GT(st.at("tx").at("pass_sent").get<int>(), 0);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_drops_total{cause=\"malformed\"}"), 3 * kMalformedEach);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_drops_total"),
            st.at("drops").at("depth").get<double>() + 3 * kMalformedEach);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_tags_total{result=\"ok\"}"), 1);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_tags_total{result=\"invalid\"}"), 1);
  EXPECT_EQ(st.at("tags").at("invalid").get<int>(), 1);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_flows"), 1);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_flow_table_capacity"), 65536);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_drip_configured_packets_per_second{port=\"cluster\"}"),
            2000);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_drip_behind_seconds{class=\"gold\"}"), 0);
  const double departures = st.at("departure_error").at("count").get<double>();
  EXPECT_EQ(departures, st.at("departures").get<double>());
  EXPECT_EQ(scraped(m, "dripgate_dataplane_departure_lateness_seconds_count"), departures);
  EXPECT_EQ(scraped(m, "dripgate_dataplane_departure_lateness_seconds_bucket{le=\"+Inf\"}"),
            departures);
  // Cumulative: each bucket at least the one before, in the order they are written.
  double last = -1;
  size_t buckets = 0;
  for (size_t p = 0; (p = m.find("dripgate_dataplane_departure_lateness_seconds_bucket{", p)) !=
                     std::string::npos;
       ++p, ++buckets) {
    const double v = std::stod(m.substr(m.find("} ", p) + 2));
    EXPECT_LE(last, v) << m.substr(p, 80);
    last = v;
  }
  EXPECT_GE(buckets, 10u);
  for (const char* f :
       {"received_packets_total counter", "sent_packets_total counter", "sent_bytes_total counter",
        "queue_depth_packets gauge", "queue_limit_packets gauge", "drops_total counter",
        "tenant_drops_total counter", "drip_configured_bytes_per_second gauge",
        "drip_configured_packets_per_second gauge", "drip_behind_seconds gauge",
        "departure_lateness_seconds histogram", "tags_total counter", "flows gauge",
        "flow_table_capacity gauge"}) {
    const std::string name = std::string("dripgate_dataplane_") + f;
    EXPECT_NE(m.find("# TYPE " + name + "\n"), std::string::npos) << name;
    EXPECT_NE(m.find("# HELP " + name.substr(0, name.find(' ')) + " "), std::string::npos) << name;
  }
  EXPECT_EQ(http(port, "GET", "/").status, 404);
  ASSERT_EQ(dp.terminate(30s), 0) << read_file(dir.file("stderr"));
}

// RSS on a device that hashes (net_null offers RSS, so the ports are configured with it): two
// RX lcores each take their share of the client port's two queues and the reverse path of the
// cluster port's, and every frame is accounted for.
TEST(DataplaneRss, NetNullQueuesAreSpreadOverTheRxLcores) {
  TempDir dir;
  std::vector<std::string> eal = test_eal_args();
  eal[0] = "--lcores";
  eal[1] = "0@0,1@0,2@1,3@0";
  eal.push_back("--vdev=net_null0");
  eal.push_back("--vdev=net_null1");
  {
    std::ofstream y(dir.file("dp.yaml"));
    y << "dataplane:\n"
      << "  eal: " << json(eal).dump() << "\n"
      << "  ports: { client: 0, cluster: 1, rx_queues: 4 }\n"
      << "  lcores: { rx: [1, 3], drip: 2 }\n"
      << "  mbufs: 8191\n"
      << "  drip: { rate_pps: 200000, rate_bps: 0, batch: 8, max_catchup: 8 }\n"
      << "  classes:\n"
      << "    default: { weight: 1, rate_pps: 0, queue_depth: 1024, ttl_ms: 100 }\n"
      << "  unknown_flows: default\n"
      << "  control_socket: " << dir.file("dp.sock") << "\n";
  }
  Process dp({dataplane_binary(), "--config", dir.file("dp.yaml"), "--shape-non-ip", "default",
              "--duration", "2", "--drain-ms", "100"},
             dir.file("stdout"), dir.file("stderr"));
  ASSERT_EQ(dp.wait(60s), 0) << read_file(dir.file("stderr"));
  const json fin = last_json_line(dir.file("stdout"));
  ASSERT_TRUE(fin.is_object()) << read_file(dir.file("stdout"));
  const json& per = fin.at("rx").at("per_lcore");
  ASSERT_EQ(per.size(), 2u) << fin.dump();
  uint64_t client = 0;
  for (const json& l : per) {
    EXPECT_GT(l.at("client").get<uint64_t>(), 0u) << fin.dump();
    EXPECT_GT(l.at("cluster").get<uint64_t>(), 0u) << fin.dump();
    client += l.at("client").get<uint64_t>();
  }
  EXPECT_EQ(client, u(fin, "rx", "client"));
  EXPECT_EQ(accounted(fin), client) << fin.dump();
  EXPECT_GT(u(fin, "tx", "shaped"), 0u);
  EXPECT_EQ(u(fin, "rx", "cluster"), u(fin, "tx", "reverse") + u(fin, "drops", "reverse_tx_full"));
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());
  EXPECT_NE(read_file(dir.file("stderr")).find("rx lcores 1,3, 4 RX queues"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataplanePcap,
                         ::testing::Values(Layout::kSingle, Layout::kSplit, Layout::kRss),
                         [](const auto& info) {
                           switch (info.param) {
                             case Layout::kSingle:
                               return "single";
                             case Layout::kSplit:
                               return "split";
                             case Layout::kRss:
                               return "rss";
                           }
                           return "";
                         });

}  // namespace
}  // namespace dripgate::testing
