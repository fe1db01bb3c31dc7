// The whole admission path end to end: a real redis-server, the real dripgate-dataplane as a bump
// in the wire between two network namespaces (net_af_packet on veth pairs), and the real
// dripgate-control pointed at the dataplane's control socket. An admitted flow is tagged, its
// UDP traffic is shaped in its plan's class while another flow goes to `default`, release
// untags it, and admission keeps answering when the dataplane is gone. Namespaces, links and
// processes are RAII (tests/netns.h, dp_harness.h): removed and reaped also on failure.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/http_client.h"
#include "tests/integration/dp_harness.h"
#include "tests/netns.h"
#include "tests/redis_server.h"

namespace dripgate::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kClientIp = "10.198.0.1";
constexpr const char* kServerIp = "10.198.0.2";
constexpr uint16_t kServerPort = 5002;
constexpr uint16_t kGoldPort = 40200;   // the admitted flow's source port
constexpr uint16_t kOtherPort = 40201;  // a flow nobody admitted
constexpr int kGoldDatagrams = 200;
constexpr int kOtherDatagrams = 100;
constexpr int kAfterRelease = 20;
// The stream plan's lease: short, so a test sees a tag outlive it.
constexpr int kStreamLeaseS = 3;

std::string control_binary() {
  const char* p = std::getenv("DG_CONTROL");
  if (p == nullptr || *p == '\0')
    throw std::runtime_error("DG_CONTROL is not set (run the test through meson test)");
  return p;
}

int udp_socket(const char* ip, uint16_t port) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = addr(ip, port);
  if (s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

// A UDP echo server in the server namespace, running until destroyed.
class EchoServer {
 public:
  explicit EchoServer(const std::string& ns) {
    std::atomic<int> state{0};
    thread_ = std::thread([this, ns, &state] {
      bool entered = run_in_netns(ns, [this, &state] {
        int fd = udp_socket(kServerIp, kServerPort);
        state = fd >= 0 ? 1 : -1;
        if (fd < 0) return;
        char buf[2048];
        while (!stop_) {
          pollfd p{fd, POLLIN, 0};
          if (::poll(&p, 1, 100) != 1) continue;
          sockaddr_in from{};
          socklen_t len = sizeof(from);
          ssize_t n = ::recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
          if (n > 0)
            ::sendto(fd, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len);
        }
        ::close(fd);
      });
      if (!entered) state = -1;
    });
    while (state == 0) std::this_thread::sleep_for(5ms);
    ok_ = state == 1;
  }
  ~EchoServer() {
    stop_ = true;
    thread_.join();
  }
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;
  bool ok() const { return ok_; }

 private:
  std::atomic<bool> stop_{false};
  bool ok_ = false;
  std::thread thread_;
};

// Lock-step UDP exchange from the client namespace: `count` datagrams from `sport`, each waiting
// for its echo (so no queue ever overflows). Returns the number of echoes received.
int udp_exchange(const std::string& ns, uint16_t sport, int count) {
  int echoed = 0;
  bool entered = run_in_netns(ns, [&] {
    int s = udp_socket(kClientIp, sport);
    if (s < 0) return;
    sockaddr_in to = addr(kServerIp, kServerPort);
    for (int i = 0; i < count; ++i) {
      std::string msg = fmt::format("{}:{}", sport, i);
      if (::sendto(s, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) < 0)
        break;
      pollfd p{s, POLLIN, 0};
      char buf[64];
      if (::poll(&p, 1, 2000) == 1 && ::recv(s, buf, sizeof(buf), 0) > 0) ++echoed;
    }
    ::close(s);
  });
  return entered ? echoed : -1;
}

std::string flow_json(uint16_t sport) {
  return json({{"src", kClientIp},
               {"sport", sport},
               {"dst", kServerIp},
               {"dport", kServerPort},
               {"proto", "udp"}})
      .dump();
}

// Control and dataplane share one config file, as in a deployment: the loader then also
// checks that the plan's class exists in the dataplane.
void write_config(const std::string& path, const std::string& sock,
                  const std::string& dataplane_yaml) {
  std::ofstream y(path);
  y << "redis: { url: \"redis://127.0.0.1:1/0\", timeout_ms: 500 }\n"
    << "control: { listen: \"127.0.0.1:8080\", threads: 2, dataplane_socket: \"" << sock << "\" }\n"
    << "plans:\n"
    << "  pro:\n"
    << "    class: gold\n"
    << "    gates:\n"
    << "      tenant: { capacity: 1000, refill_per_s: 100 }\n"
    << "    concurrency: { max_streams: 8, lease_s: 120 }\n"
    << "  stream:\n"
    << "    class: gold\n"
    << "    quota: { tokens_per_month: 1000000 }\n"
    << "    concurrency: { max_streams: 8, lease_s: " << kStreamLeaseS << " }\n"
    << "tenants:\n"
    << "  t-gold: { plan: pro }\n"
    << "  t-stream: { plan: stream }\n"
    << dataplane_yaml;
}

uint64_t class_tx(const json& stats, const char* cls_name) {
  return stats.at("classes").at(cls_name).at("tx_pkts").get<uint64_t>();
}

TEST(ControlDataplane, AdmittedFlowIsShapedInItsClassUntilReleased) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for network namespaces";
  RedisServer redis;
  ApplianceTopology topo("dgcd", kClientIp, kServerIp);
  TempDir dir;
  const std::string sock = dir.file("dp.sock");
  const std::string cfg = dir.file("dripgate.yaml");
  write_config(cfg, sock, topo.dataplane_yaml(sock));

  Process dp({dataplane_binary(), "--config", cfg}, dir.file("dp.out"), dir.file("dp.err"));
  ControlClient cc(sock, 30s);  // the dataplane is up once its socket answers
  ASSERT_TRUE(cc.call({{"op", "stats"}}).at("ok").get<bool>());

  const int port = free_port();
  Process control({control_binary(), "--config", cfg, "--redis", redis.url(), "--listen",
                   fmt::format("127.0.0.1:{}", port), "--log-level", "debug"},
                  dir.file("control.out"), dir.file("control.err"));
  auto deadline = std::chrono::steady_clock::now() + 15s;
  while (http(port, "GET", "/healthz").status != 200) {
    ASSERT_TRUE(control.running()) << read_file(dir.file("control.err"));
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << read_file(dir.file("control.err"));
    std::this_thread::sleep_for(20ms);
  }

  // Admission tags the flow in the dataplane before it answers.
  HttpResponse a =
      http(port, "POST", "/v1/admit", R"({"tenant":"t-gold","flow":)" + flow_json(kGoldPort) + "}");
  ASSERT_EQ(a.status, 200) << a.body << read_file(dir.file("control.err"));
  EXPECT_EQ(a.header("dripgate-flow-tag"), "ok") << read_file(dir.file("control.err"));
  json st = cc.call({{"op", "stats"}}).at("stats");
  EXPECT_EQ(st.at("flows").get<int>(), 1) << st.dump();
  const uint64_t gold0 = class_tx(st, "gold"), default0 = class_tx(st, "default");
  EXPECT_EQ(gold0, 0u);

  // Traffic of the admitted flow goes out in gold, another flow in default.
  EchoServer echo(topo.ns('s'));
  ASSERT_TRUE(echo.ok()) << "UDP echo server could not start in " << topo.ns('s');
  EXPECT_EQ(udp_exchange(topo.ns('c'), kGoldPort, kGoldDatagrams), kGoldDatagrams)
      << read_file(dir.file("dp.err"));
  EXPECT_EQ(udp_exchange(topo.ns('c'), kOtherPort, kOtherDatagrams), kOtherDatagrams);
  st = cc.call({{"op", "stats"}}).at("stats");
  // Every datagram was echoed, so each was sent before the stats were read.
  EXPECT_EQ(class_tx(st, "gold"), static_cast<uint64_t>(kGoldDatagrams)) << st.dump();
  EXPECT_GE(class_tx(st, "default") - default0, static_cast<uint64_t>(kOtherDatagrams))
      << st.dump();
  EXPECT_GE(st.at("tx").at("reverse").get<uint64_t>(),
            static_cast<uint64_t>(kGoldDatagrams + kOtherDatagrams))
      << st.dump();

  // Release untags: the flow leaves the table and its next packets are in default.
  json admitted = json::parse(a.body, nullptr, false);
  ASSERT_TRUE(admitted.is_object() && admitted.contains("request_id")) << a.body;
  HttpResponse rel =
      http(port, "POST", "/v1/release",
           json({{"tenant", "t-gold"}, {"request_id", admitted["request_id"]}}).dump());
  ASSERT_EQ(rel.status, 200) << rel.body;
  EXPECT_EQ(rel.header("dripgate-flow-tag"), "ok");
  st = cc.call({{"op", "stats"}}).at("stats");
  EXPECT_EQ(st.at("flows").get<int>(), 0) << st.dump();
  const uint64_t default1 = class_tx(st, "default");
  EXPECT_EQ(udp_exchange(topo.ns('c'), kGoldPort, kAfterRelease), kAfterRelease);
  st = cc.call({{"op", "stats"}}).at("stats");
  EXPECT_EQ(class_tx(st, "gold"), static_cast<uint64_t>(kGoldDatagrams)) << st.dump();
  EXPECT_GE(class_tx(st, "default") - default1, static_cast<uint64_t>(kAfterRelease)) << st.dump();

  // Without the dataplane, admission still answers and says the tag did not happen.
  ASSERT_EQ(dp.terminate(30s), 0) << read_file(dir.file("dp.err"));
  const json fin = last_json_line(dir.file("dp.out"));
  ASSERT_TRUE(fin.is_object()) << read_file(dir.file("dp.out"));
  EXPECT_EQ(fin.at("flows").get<int>(), 0);
  EXPECT_EQ(fin.at("mbufs_available").get<uint64_t>(), fin.at("mbufs_total").get<uint64_t>());
  for (uint16_t sport : {uint16_t{40300}, uint16_t{40301}}) {
    HttpResponse u =
        http(port, "POST", "/v1/admit", R"({"tenant":"t-gold","flow":)" + flow_json(sport) + "}");
    ASSERT_EQ(u.status, 200) << u.body;
    EXPECT_EQ(u.header("dripgate-flow-tag"), "unavailable") << read_file(dir.file("control.err"));
  }
  EXPECT_EQ(control.terminate(10s), 0) << read_file(dir.file("control.err"));
}

// The dataplane and the control daemon of one test, both up.
struct Appliance {
  // gold: the gold class's line of the dataplane's YAML instead of the harness's.
  explicit Appliance(const char* name, const std::string& gold = {})
      : topo(name, kClientIp, kServerIp),
        sock(dir.file("dp.sock")),
        cfg(dir.file("dripgate.yaml")),
        port(free_port()) {
    std::string yaml = topo.dataplane_yaml(sock);
    if (!gold.empty()) {
      const size_t at = yaml.find("    gold:");
      yaml.replace(at, yaml.find('\n', at) - at, gold);
    }
    write_config(cfg, sock, yaml);
  }
  // Starts the dataplane and then the control daemon; false (with a failure) if either
  // does not come up.
  bool start() {
    dp = std::make_unique<Process>(std::vector<std::string>{dataplane_binary(), "--config", cfg},
                                   dir.file("dp.out"), dir.file("dp.err"));
    cc = std::make_unique<ControlClient>(sock, 30s);
    if (!cc->call({{"op", "stats"}}).at("ok").get<bool>()) return false;
    control = std::make_unique<Process>(
        std::vector<std::string>{control_binary(), "--config", cfg, "--redis", redis.url(),
                                 "--listen", fmt::format("127.0.0.1:{}", port)},
        dir.file("control.out"), dir.file("control.err"));
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    while (http(port, "GET", "/healthz").status != 200) {
      if (!control->running() || std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << read_file(dir.file("control.err"));
        return false;
      }
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }
  json stats() { return cc->call({{"op", "stats"}}).at("stats"); }
  // Admits a stream of t-stream with the flow from sport; its request id.
  std::string admit(uint16_t sport) {
    HttpResponse a = http(port, "POST", "/v1/admit",
                          R"({"tenant":"t-stream","tokens":10,"flow":)" + flow_json(sport) + "}");
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.header("dripgate-flow-tag"), "ok") << read_file(dir.file("control.err"));
    return a.body_json().value("request_id", std::string());
  }
  RedisServer redis;
  ApplianceTopology topo;
  TempDir dir;
  std::string sock, cfg;
  int port;
  std::unique_ptr<Process> dp, control;
  std::unique_ptr<ControlClient> cc;
};

// A stream charge renews its flow's tag: charged before the first tag ran out, the flow is still
// shaped in its class after that tag's expiry, while a flow admitted with it and never charged
// has fallen to default. The dataplane knows the flows' tenant. The times are the plan's lease
// (kStreamLeaseS) with wide margins either side: the checks are on classes, not on durations.
TEST(ControlDataplane, AStreamChargeKeepsItsFlowTaggedPastTheFirstLease) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for network namespaces";
  Appliance ap("dgcs");
  ASSERT_TRUE(ap.start());
  EchoServer echo(ap.topo.ns('s'));
  ASSERT_TRUE(echo.ok());

  constexpr uint16_t kCharged = 40400, kLeft = 40401;
  // Both tags are made before their admissions are answered: they run out by t0 + the lease.
  const std::string rid = ap.admit(kCharged);
  ap.admit(kLeft);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_FALSE(rid.empty());
  json st = ap.stats();
  EXPECT_EQ(st.at("flows").get<int>(), 2) << st.dump();
  EXPECT_EQ(st.at("tenants").at("known").get<int>(), 1) << st.dump();

  // Charged with a third of the lease left: the tag is given again for a whole lease from here.
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(kStreamLeaseS * 1000 * 2 / 3));
  HttpResponse c = http(ap.port, "POST", "/v1/charge",
                        R"({"tenant":"t-stream","request_id":")" + rid + R"(","tokens":5})");
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.body_json()["lease_s"], kStreamLeaseS) << c.body;
  EXPECT_EQ(c.header("dripgate-flow-tag"), "ok") << read_file(ap.dir.file("control.err"));

  // Past the first tags' expiry (by a tenth of the lease), well before the renewed one's.
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(kStreamLeaseS * 1100));
  st = ap.stats();
  const uint64_t gold0 = class_tx(st, "gold"), default0 = class_tx(st, "default");
  constexpr int kDatagrams = 20;
  EXPECT_EQ(udp_exchange(ap.topo.ns('c'), kCharged, kDatagrams), kDatagrams);
  st = ap.stats();
  EXPECT_EQ(class_tx(st, "gold") - gold0, static_cast<uint64_t>(kDatagrams)) << st.dump();
  const uint64_t default1 = class_tx(st, "default");
  EXPECT_EQ(udp_exchange(ap.topo.ns('c'), kLeft, kDatagrams), kDatagrams);
  st = ap.stats();
  EXPECT_EQ(class_tx(st, "gold") - gold0, static_cast<uint64_t>(kDatagrams)) << st.dump();
  EXPECT_GE(class_tx(st, "default") - default1, static_cast<uint64_t>(kDatagrams)) << st.dump();
  EXPECT_GE(default1, default0);
  EXPECT_EQ(ap.control->terminate(10s), 0) << read_file(ap.dir.file("control.err"));
  EXPECT_EQ(ap.dp->terminate(30s), 0) << read_file(ap.dir.file("dp.err"));
}

// The tenant an admission names reaches the dataplane's queues: a tagged flow that overflows a
// small, slow class has its drops counted under the tenant's name, which only a tag that carried
// the tenant, a fast path that handed it to the scheduler and a stats reader that named it give.
TEST(ControlDataplane, DropsAreCountedUnderTheAdmittedTenantsName) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for network namespaces";
  Appliance ap("dgct", "    gold:    { weight: 4, rate_pps: 200, queue_depth: 8, ttl_ms: 2000 }");
  ASSERT_TRUE(ap.start());
  constexpr uint16_t kBurstPort = 40500;
  ASSERT_FALSE(ap.admit(kBurstPort).empty());
  // Far more datagrams at once than 8 queued and 200/s let through: most are dropped at depth.
  constexpr int kDatagrams = 300;
  int sent = 0;
  ASSERT_TRUE(run_in_netns(ap.topo.ns('c'), [&] {
    const int s = udp_socket(kClientIp, kBurstPort);
    if (s < 0) return;
    const sockaddr_in to = addr(kServerIp, kServerPort);
    for (int i = 0; i < kDatagrams; ++i)
      sent += ::sendto(s, "x", 1, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 1;
    ::close(s);
  }));
  ASSERT_EQ(sent, kDatagrams);
  // Waits for the datagrams to reach the dataplane (not a time bound on it: the drops, once
  // counted, are what is checked).
  json by_tenant;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    const json st = ap.stats();
    by_tenant = st.at("drops").at("by_tenant");
    if (st.at("classes").at("gold").at("classified").get<uint64_t>() >=
            static_cast<uint64_t>(kDatagrams) ||
        std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(by_tenant.size(), 1u) << by_tenant.dump();
  EXPECT_EQ(by_tenant[0].at("tenant"), "t-stream") << by_tenant.dump();
  EXPECT_GT(by_tenant[0].at("depth").get<uint64_t>(), 0u) << by_tenant.dump();
  EXPECT_EQ(ap.control->terminate(10s), 0) << read_file(ap.dir.file("control.err"));
  EXPECT_EQ(ap.dp->terminate(30s), 0) << read_file(ap.dir.file("dp.err"));
}

}  // namespace
}  // namespace dripgate::testing
