// dripgate-dataplane reloads its YAML on SIGHUP while traffic flows: client netns <-veth->
// [net_af_packet0 dripgate-dataplane net_af_packet1] <-veth-> server netns, a UDP flow from
// the client (DSCP 10) faster than its class's cap, so packets are queued at every reload. An
// invalid file and a restart-only change are refused whole (logged with file:line:col / the
// fields) and change nothing; a valid file raises the class's rate and adds a rule that moves
// the flow to gold. Every packet is accounted for and no mbuf leaks. Both lcore layouts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/integration/dp_harness.h"
#include "tests/netns.h"

namespace dripgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kClientIp = "10.198.0.1";
constexpr const char* kServerIp = "10.198.0.2";
constexpr uint16_t kServerPort = 5001;
constexpr int kDscp = 10;

// About 1000 datagrams a second (20 every 20 ms) until `stop`; counts what the kernel took.
void send_flow(bool entered, const std::atomic<bool>& stop, std::atomic<uint64_t>& sent) {
  if (!entered) return;
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int tos = kDscp << 2;
  ::setsockopt(s, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
  sockaddr_in local = addr(kClientIp, 40000), remote = addr(kServerIp, kServerPort);
  ::bind(s, reinterpret_cast<sockaddr*>(&local), sizeof(local));
  char payload[64] = "dripgate reload test";
  while (!stop.load()) {
    for (int i = 0; i < 20; ++i) {
      if (::sendto(s, payload, sizeof(payload), 0, reinterpret_cast<sockaddr*>(&remote),
                   sizeof(remote)) == sizeof(payload))
        sent.fetch_add(1);
    }
    std::this_thread::sleep_for(20ms);
  }
  ::close(s);
}

// Counts datagrams until `stop` and a quiet 200 ms.
void receive_flow(bool entered, std::atomic<int>& ready, const std::atomic<bool>& stop,
                  std::atomic<uint64_t>& got) {
  if (!entered) {
    ready = -1;
    return;
  }
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int buf = 4 << 20;
  ::setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf));
  timeval tv{0, 200000};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a = addr(kServerIp, kServerPort);
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ready = -1;
    ::close(s);
    return;
  }
  ready = 1;
  char b[2048];
  for (;;) {
    if (::recv(s, b, sizeof(b), 0) > 0) {
      got.fetch_add(1);
    } else if (stop.load()) {
      break;
    }
  }
  ::close(s);
}

// The YAML of this test; `default_cls` and `rules` are the flow-style body of the class and
// the extra classify lines. The class `default` is on line 9 (checked by the invalid reload).
void write_yaml(const std::string& path, const std::vector<std::string>& eal, bool split,
                uint32_t mbufs, const std::string& default_cls, const std::string& rules,
                const std::string& sock) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream y(tmp);
    y << "dataplane:\n"
      << "  eal: " << json(eal).dump() << "\n"
      << "  ports: { client: 0, cluster: 1 }\n"
      << "  lcores: { rx: 1, drip: " << (split ? 2 : 1) << " }\n"
      << "  mbufs: " << mbufs << "\n"
      << "  drip: { rate_pps: 0, rate_bps: 0, batch: 1, max_catchup: 64 }\n"
      << "  classes:\n"
      << "    gold:    { weight: 4, rate_pps: 0, queue_depth: 8192, ttl_ms: 60000 }\n"
      << "    default: { " << default_cls << " }\n"
      << "  classify:\n"
      << "    - { dst: \"10.250.0.0/16\", class: gold }\n"
      << rules << "  unknown_flows: default\n"
      << "  control_socket: " << sock << "\n";
  }
  std::filesystem::rename(tmp, path);  // the dataplane never reads half a file
}

// Polls the stats until done(stats) or a minute has passed (a test failure); returns them.
template <typename Done>
json wait_for(ControlClient& cc, Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    json a = cc.call({{"op", "stats"}});
    if (!a.at("ok").get<bool>()) throw std::runtime_error(a.dump());
    if (done(a.at("stats"))) return a.at("stats");
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("condition not reached: " + a.dump());
    std::this_thread::sleep_for(20ms);
  }
}

uint64_t cls(const json& st, const char* name, const char* field) {
  return st.at("classes").at(name).at(field).get<uint64_t>();
}

class DataplaneReload : public ::testing::TestWithParam<bool> {};  // param: split layout

TEST_P(DataplaneReload, SighupAppliesLiveOrRefusesWholeAndEveryPacketIsAccountedFor) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for network namespaces";
  const bool split = GetParam();
  ApplianceTopology topo("dgrl", kClientIp, kServerIp);
  TempDir dir;
  const std::string yaml = dir.file("dp.yaml"), sock = dir.file("dp.sock");
  std::vector<std::string> eal = topo.eal_args();
  if (split) {
    eal[0] = "--lcores";
    eal[1] = "0@0,1@0,2@1";
  }
  const std::string capped = "weight: 1, rate_pps: 200, queue_depth: 8192, ttl_ms: 60000";
  write_yaml(yaml, eal, split, 8191, capped, "", sock);
  Process dp({dataplane_binary(), "--config", yaml, "--drain-ms", "10000"}, dir.file("stdout"),
             dir.file("stderr"));
  ControlClient cc(sock, 30s);

  std::atomic<bool> stop_send{false}, stop_recv{false};
  std::atomic<int> ready{0};
  std::atomic<uint64_t> sent{0}, got{0};
  std::thread server =
      thread_in_netns(topo.ns('s'), [&](bool ok) { receive_flow(ok, ready, stop_recv, got); });
  while (ready == 0) std::this_thread::sleep_for(10ms);
  if (ready != 1) {
    server.join();
    FAIL() << "server could not bind";
  }
  std::thread client =
      thread_in_netns(topo.ns('c'), [&](bool ok) { send_flow(ok, stop_send, sent); });
  auto stop_traffic = [&] {
    stop_send = true;
    client.join();
    stop_recv = true;
    server.join();
  };
  auto hup_and_wait = [&](const char* counter, uint64_t n) {
    EXPECT_EQ(::kill(dp.pid(), SIGHUP), 0);
    return wait_for(cc, [&](const json& st) { return st.at("reloads").at(counter) == n; });
  };

  try {
    // Mid-stream: the flow (no rule yet: default) is faster than default's cap, so it queues.
    json st = wait_for(cc, [](const json& s) { return cls(s, "default", "queue_len") >= 100; });

    // 1. An invalid file: refused, logged as file:line:col: path: message; nothing changes.
    write_yaml(yaml, eal, split, 8191, "weight: many, rate_pps: 5000", "", sock);
    st = hup_and_wait("refused", 1);
    EXPECT_TRUE(dp.running());
    const std::string log1 = read_file(dir.file("stderr"));
    EXPECT_NE(log1.find(yaml + ":9:"), std::string::npos) << log1;
    EXPECT_NE(log1.find("dataplane.classes.default.weight: expected an integer"), std::string::npos)
        << log1;
    EXPECT_EQ(cls(st, "default", "rate_pps"), 200u);

    // 2. A live change beside a restart-only one: refused whole, the field named.
    write_yaml(yaml, eal, split, 4095, "weight: 1, rate_pps: 5000, queue_depth: 8192", "", sock);
    st = hup_and_wait("refused", 2);
    EXPECT_TRUE(dp.running());
    const std::string log2 = read_file(dir.file("stderr"));
    EXPECT_NE(log2.find("these fields need a restart: dataplane.mbufs"), std::string::npos) << log2;
    EXPECT_EQ(cls(st, "default", "rate_pps"), 200u);
    EXPECT_EQ(cls(st, "gold", "classified"), 0u);
    // The backlog the valid reload meets: waited for, since two reloads took time in which a
    // sender slowed by a loaded machine may have let the queue drain a little.
    wait_for(cc, [](const json& s) { return cls(s, "default", "queue_len") >= 100; });

    // 3. Valid: default's cap goes up and a new rule moves the flow (DSCP 10) to gold.
    write_yaml(yaml, eal, split, 8191,
               "weight: 1, rate_pps: 5000, queue_depth: 8192, ttl_ms: 60000",
               fmt::format("    - {{ dscp: {}, class: gold }}\n", kDscp), sock);
    st = hup_and_wait("applied", 1);
    EXPECT_TRUE(dp.running());
    EXPECT_EQ(cls(st, "default", "rate_pps"), 5000u);
    const uint64_t default_at_reload = cls(st, "default", "classified");
    // The new rule takes the flow, and default's backlog leaves at its new rate.
    st = wait_for(cc, [](const json& s) {
      return cls(s, "gold", "classified") >= 200 && cls(s, "default", "queue_len") == 0;
    });
    EXPECT_EQ(st.at("reloads").at("refused").get<int>(), 2);
    EXPECT_LE(cls(st, "default", "classified"), default_at_reload + 32) << "one burst at most";
  } catch (const std::exception& e) {
    stop_traffic();
    FAIL() << e.what() << "\n" << read_file(dir.file("stderr"));
  }
  stop_send = true;
  client.join();
  // Everything sent is through the dataplane before the receiver stops.
  const uint64_t n_sent = sent.load();
  wait_for(cc, [&](const json& s) {
    return cls(s, "gold", "tx_pkts") + cls(s, "default", "tx_pkts") >= n_sent &&
           s.at("queue_len").get<uint64_t>() == 0;
  });
  stop_recv = true;
  server.join();

  ASSERT_EQ(dp.terminate(30s), 0) << read_file(dir.file("stderr"));
  const json fin = last_json_line(dir.file("stdout"));
  ASSERT_TRUE(fin.is_object()) << read_file(dir.file("stdout"));
  // Every frame the client port received is sent or dropped by a cause; no queued packet was
  // dropped by the reloads (no depth, TTL or shutdown drops), and every mbuf is back.
  EXPECT_EQ(accounted(fin), fin.at("rx").at("client").get<uint64_t>()) << fin.dump();
  const json& d = fin.at("drops");
  for (const char* cause : {"depth", "ttl", "tx_full", "shutdown", "unknown", "ring"})
    EXPECT_EQ(d.at(cause).get<int>(), 0) << cause << ": " << fin.dump();
  for (const char* c : {"gold", "default"}) {
    EXPECT_EQ(cls(fin, c, "classified"), cls(fin, c, "tx_pkts")) << c;
    EXPECT_GT(cls(fin, c, "tx_pkts"), 0u) << c;
  }
  EXPECT_GE(cls(fin, "gold", "tx_pkts") + cls(fin, "default", "tx_pkts"), n_sent);
  EXPECT_EQ(got.load(), n_sent) << "datagrams sent vs received";
  EXPECT_EQ(fin.at("reloads").at("applied").get<int>(), 1);
  EXPECT_EQ(fin.at("reloads").at("refused").get<int>(), 2);
  EXPECT_EQ(fin.at("rate_updates").get<int>(), 0);
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataplaneReload, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "split" : "single"; });

}  // namespace
}  // namespace dripgate::testing
