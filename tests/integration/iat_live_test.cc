// dripgate-iat and dripgate-burst as processes, on a veth pair between two network namespaces
// created here: the profile of a known pattern, the exact packet count, nothing left behind on
// the interface after a normal exit, after SIGINT/SIGTERM and in XDP mode; the pcap and compare
// modes on a capture written here. Needs root (tc, BPF, netns).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/prom_text.h"
#include "tests/http_client.h"
#include "tests/netns.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string env_or_die(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) throw std::runtime_error(std::string(name) + " is not set (run through meson)");
  return v;
}

using dripgate::testing::run_checked;
using Result = dripgate::testing::CommandResult;

Result sh(const std::string& cmd) {
  return dripgate::testing::run_shell(cmd + " 2>&1");
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A child process with stdout/stderr in files; killed and reaped if the test gives up on it.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& out, const std::string& err)
      : out_(out), err_(err) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(o, 1);
      ::dup2(e, 2);
      std::vector<char*> a;
      for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      ::execv(a[0], a.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Exit code, or -1 on timeout / death by a signal.
  int wait(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
  std::string out() const { return read_file(out_); }
  std::string err() const { return read_file(err_); }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string out_, err_;
};

// Two namespaces joined by a veth pair with static neighbours (no ARP in the measured traffic).
// tests/netns.h removes them in the destructor, and leftovers of dead test processes.
class VethNetns {
  dripgate::testing::TestNetns net_{"dgiat"};  // first: the names below come from it

 public:
  const std::string ns_a = net_.add_netns("a"), ns_b = net_.add_netns("b");
  const std::string if_a = net_.name("va"), if_b = net_.name("vb");
  const std::string addr_a = "10.77.0.1", addr_b = "10.77.0.2";

  VethNetns() {
    net_.add_veth({ns_a, if_a, addr_a + "/24", "02:00:00:77:00:01"},
                  {ns_b, if_b, addr_b + "/24", "02:00:00:77:00:02"});
    run_checked("ip -n " + ns_a + " neigh replace " + addr_b + " lladdr 02:00:00:77:00:02 dev " +
                if_a + " nud permanent");
    run_checked("ip -n " + ns_b + " neigh replace " + addr_a + " lladdr 02:00:00:77:00:01 dev " +
                if_b + " nud permanent");
  }

  // Side 'a' (sender) or 'b' (receiver).
  const std::string& ns(char side) const { return side == 'a' ? ns_a : ns_b; }
  const std::string& ifname(char side) const { return side == 'a' ? if_a : if_b; }

  std::string tc_filters(char side, const std::string& dir = "ingress") const {
    return sh("ip netns exec " + ns(side) + " tc filter show dev " + ifname(side) + " " + dir).out;
  }
  std::string qdiscs(char side) const {
    return sh("ip -n " + ns(side) + " -d qdisc show dev " + ifname(side)).out;
  }
  std::string links(char side) const { return sh("ip -n " + ns(side) + " -d link show").out; }

  // Polls until the probe is on the interface (tc filter or XDP program), up to 10 s.
  bool wait_attached(bool xdp, char side = 'b', const std::string& dir = "ingress") const {
    for (int i = 0; i < 500; ++i) {
      if (xdp ? links(side).find("prog/xdp") != std::string::npos
              : tc_filters(side, dir).find("bpf") != std::string::npos)
        return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // Nothing of the probe is left on either side: no tc filter, no clsact qdisc, no XDP
  // program, and each namespace holds exactly the interfaces it had.
  void expect_clean() const {
    for (char side : {'a', 'b'}) {
      EXPECT_EQ(tc_filters(side, "ingress"), "") << side;
      EXPECT_EQ(tc_filters(side, "egress"), "") << side;
      EXPECT_EQ(qdiscs(side).find("clsact"), std::string::npos) << qdiscs(side);
      std::string l = links(side);
      EXPECT_EQ(l.find("xdp"), std::string::npos) << l;
      int n = 0;
      for (size_t p = 0; (p = l.find(": <", p)) != std::string::npos; ++p) ++n;
      EXPECT_EQ(n, 2) << l;  // lo and the veth
    }
  }
};

class IatLive : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_FAIL() << "needs root (tc, BPF, network namespaces)";
    iat_ = env_or_die("DRIPGATE_IAT");
    burst_ = env_or_die("DRIPGATE_BURST");
    dir_ = fs::temp_directory_path() / ("iat_live_test." + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& f) const { return (dir_ / f).string(); }

  std::vector<std::string> live_args(const VethNetns& n, const std::string& duration,
                                     const std::string& json, bool xdp = false) const {
    std::vector<std::string> a = {
        iat_,    "live",          "--iface", n.if_b,       "--netns", n.ns_b,   "--filter-proto",
        "udp",   "--filter-port", "9000",    "--duration", duration,  "--json", json,
        "--svg", path("live.svg")};
    if (xdp) a.push_back("--xdp");
    return a;
  }

  // Runs dripgate-burst in the sender namespace; returns what it reported (--json).
  nlohmann::json send(const VethNetns& n, const std::string& pattern) const {
    const std::string report = path("burst.json");
    auto r = sh(burst_ + " --netns " + n.ns_a + " --target " + n.addr_b + ":9000 --json " + report +
                " " + pattern);
    EXPECT_EQ(r.status, 0) << r.out;
    if (r.status != 0) return nlohmann::json::object();
    return nlohmann::json::parse(read_file(report));
  }

  std::string iat_, burst_;
  fs::path dir_;
};

uint64_t mass(const nlohmann::json& prof, uint64_t lo_ns, uint64_t hi_ns) {
  uint64_t n = 0;
  for (const auto& b : prof["histogram"]["buckets"])
    if (b[0].get<uint64_t>() >= lo_ns && b[1].get<uint64_t>() <= hi_ns) n += b[2].get<uint64_t>();
  return n;
}

TEST_F(IatLive, BurstThenSteadyShowsBothModesAndExactCount) {
  VethNetns n;
  Child iat(live_args(n, "6s", path("a.json")), path("out"), path("err"));
  ASSERT_TRUE(n.wait_attached(false)) << iat.err();
  auto burst = send(n, "--burst 500 --within 0");
  auto steady = send(n, "--rate 1000 --count 500");
  ASSERT_EQ(iat.wait(30s), 0) << iat.err();
  ASSERT_EQ(burst.value("sent", 0u), 500u);
  ASSERT_EQ(steady.value("sent", 0u), 500u);
  auto j = nlohmann::json::parse(read_file(path("a.json")));
  EXPECT_EQ(j["packets"].get<uint64_t>(), 1000u) << iat.out();
  EXPECT_EQ(j["intervals"].get<uint64_t>(), 999u);
  // The probe and the sender read the same CLOCK_MONOTONIC: the first packet arrived after the
  // first send began, the last one after the last run began (and not long after it ended).
  EXPECT_GE(j["first_ns"].get<uint64_t>(), burst["start_monotonic_ns"].get<uint64_t>());
  EXPECT_LE(j["first_ns"].get<uint64_t>(), burst["end_monotonic_ns"].get<uint64_t>() + 100'000'000);
  EXPECT_GE(j["last_ns"].get<uint64_t>(), steady["start_monotonic_ns"].get<uint64_t>());
  EXPECT_LE(j["last_ns"].get<uint64_t>(), steady["end_monotonic_ns"].get<uint64_t>() + 100'000'000);
  // Tolerant bounds: a shared machine delays some sends, but most of the back-to-back burst is
  // far below 50 us and most of the paced half sits around 1 ms.
  EXPECT_GE(mass(j, 0, 65'536), 400u) << iat.out();
  EXPECT_GE(mass(j, 491'520, 2'097'152), 300u) << iat.out();
  EXPECT_GE(j["windows"][0]["max_count"].get<uint64_t>(), 10u);
  EXPECT_GT(j["windows"][0]["burst_factor"].get<double>(), 5.0);
  EXPECT_FALSE(j["cv_exact"].get<bool>());
  const std::string text = iat.out();
  EXPECT_NE(text.find("packets     1000"), std::string::npos) << text;
  EXPECT_NE(text.find("@inter_arrival:"), std::string::npos);
  EXPECT_NE(read_file(path("live.svg")).find("</svg>"), std::string::npos);
  n.expect_clean();
}

class IatLiveSignal : public IatLive, public ::testing::WithParamInterface<int> {};

TEST_P(IatLiveSignal, StopsEarlyDetachesAndReports) {
  VethNetns n;
  Child iat(live_args(n, "120s", path("s.json")), path("out"), path("err"));
  ASSERT_TRUE(n.wait_attached(false)) << iat.err();
  send(n, "--burst 100 --within 1ms --count 3 --every 10ms");
  ::kill(iat.pid(), GetParam());
  ASSERT_EQ(iat.wait(10s), 0) << iat.err();
  EXPECT_NE(iat.err().find(std::string("stopped early by SIG") + sigabbrev_np(GetParam())),
            std::string::npos)
      << iat.err();
  auto j = nlohmann::json::parse(read_file(path("s.json")));
  EXPECT_EQ(j["packets"].get<uint64_t>(), 300u);
  EXPECT_LT(j["capture_ns"].get<uint64_t>(), 60'000'000'000u);
  n.expect_clean();
}

INSTANTIATE_TEST_SUITE_P(Signals, IatLiveSignal, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) { return std::string(sigabbrev_np(info.param)); });

double scraped(const std::string& body, const std::string& selector) {
  auto sel = dripgate::common::parse_prom_selector(selector);
  if (!sel) return -2;
  auto r = dripgate::common::read_prom_metric(body, *sel, dripgate::common::PromAggregate::kSum);
  return r.status == dripgate::common::PromReading::Status::kOk ? r.value : -1;
}

// serve keeps the probe attached and answers GET /metrics with the packets counted so far, the
// inter-arrival histogram (cumulative, its count one less than the packets) and the burst
// windows over its period; SIGTERM detaches it and leaves nothing on the interface.
TEST_F(IatLive, ServeAnswersScrapesUntilSigterm) {
  VethNetns n;
  Child iat({iat_, "serve", "--iface", n.if_b, "--netns", n.ns_b, "--filter-proto", "udp",
             "--filter-port", "9000", "--listen", "127.0.0.1:0", "--period", "30s"},
            path("out"), path("err"));
  ASSERT_TRUE(n.wait_attached(false)) << iat.err();
  int port = 0;
  for (int i = 0; i < 500 && port == 0; ++i) {
    const std::string e = iat.err();
    if (const size_t at = e.find("(port "); at != std::string::npos)
      port = std::stoi(e.substr(at + 6));
    else
      std::this_thread::sleep_for(20ms);
  }
  ASSERT_GT(port, 0) << iat.err();
  send(n, "--burst 300 --within 0");
  send(n, "--rate 1000 --count 100");
  // The windows' peaks are taken once a second.
  std::this_thread::sleep_for(1500ms);
  const auto r = dripgate::testing::http(port, "GET", "/metrics");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string& m = r.body;
  const std::string at = "{iface=\"" + n.if_b + "\"}";
  EXPECT_EQ(scraped(m, "dripgate_iat_packets_total" + at), 400) << m;
  EXPECT_EQ(scraped(m, "dripgate_iat_interarrival_seconds_count" + at), 399);
  EXPECT_EQ(scraped(m, "dripgate_iat_interarrival_seconds_bucket{le=\"+Inf\"}"), 399);
  // Most of the back-to-back burst is well below 65 us, most of the paced run around 1 ms.
  EXPECT_GE(scraped(m, "dripgate_iat_interarrival_seconds_bucket{le=\"6.5536e-05\"}"), 250) << m;
  EXPECT_LE(scraped(m, "dripgate_iat_interarrival_seconds_bucket{le=\"0.000524288\"}"), 330) << m;
  const double sum = scraped(m, "dripgate_iat_interarrival_seconds_sum" + at);
  EXPECT_GT(sum, 0.09);
  EXPECT_LT(sum, 5.0);
  double last = 0;
  size_t buckets = 0;
  for (size_t p = 0;
       (p = m.find("dripgate_iat_interarrival_seconds_bucket{", p)) != std::string::npos;
       ++p, ++buckets) {
    const double v = std::stod(m.substr(m.find("} ", p) + 2));
    EXPECT_LE(last, v) << m.substr(p, 100);
    last = v;
  }
  EXPECT_GE(buckets, 50u);
  EXPECT_GE(scraped(m, "dripgate_iat_window_peak_packets{window=\"100us\"}"), 10) << m;
  EXPECT_GE(scraped(m, "dripgate_iat_window_peak_packets{window=\"10ms\"}"),
            scraped(m, "dripgate_iat_window_peak_packets{window=\"1ms\"}"));
  EXPECT_GT(scraped(m, "dripgate_iat_burst_factor{window=\"1ms\"}"), 5) << m;
  for (const char* f : {"packets_total counter", "interarrival_seconds histogram",
                        "window_peak_packets gauge", "burst_factor gauge"})
    EXPECT_NE(m.find(std::string("# TYPE dripgate_iat_") + f + "\n"), std::string::npos) << f;
  EXPECT_EQ(dripgate::testing::http(port, "GET", "/").status, 404);
  ::kill(iat.pid(), SIGTERM);
  ASSERT_EQ(iat.wait(10s), 0) << iat.err();
  EXPECT_NE(iat.err().find("stopped by SIGTERM; probe detached"), std::string::npos) << iat.err();
  n.expect_clean();
}

TEST_F(IatLive, XdpModeCountsAndDetaches) {
  VethNetns n;
  Child iat(live_args(n, "4s", path("x.json"), true), path("out"), path("err"));
  ASSERT_TRUE(n.wait_attached(true)) << iat.err();
  send(n, "--burst 200 --within 0");
  ASSERT_EQ(iat.wait(30s), 0) << iat.err();
  auto j = nlohmann::json::parse(read_file(path("x.json")));
  EXPECT_EQ(j["packets"].get<uint64_t>(), 200u);
  EXPECT_NE(j["source"].get<std::string>().find("xdp"), std::string::npos);
  n.expect_clean();
}

TEST_F(IatLive, EgressHookOnTheSender) {
  VethNetns n;
  Child iat(
      {iat_, "live", "--iface", n.if_a, "--netns", n.ns_a, "--direction", "egress", "--filter-dst",
       n.addr_b + "/32", "--filter-proto", "udp", "--duration", "3s", "--json", path("e.json")},
      path("out"), path("err"));
  ASSERT_TRUE(n.wait_attached(false, 'a', "egress")) << iat.err();
  send(n, "--burst 150 --within 0");
  ASSERT_EQ(iat.wait(30s), 0) << iat.err();
  auto j = nlohmann::json::parse(read_file(path("e.json")));
  EXPECT_EQ(j["packets"].get<uint64_t>(), 150u);
  EXPECT_NE(j["source"].get<std::string>().find("tc egress"), std::string::npos);
  n.expect_clean();
}

// The same traffic seen by the probe and by tcpdump (nanosecond pcap): `pcap` mode and `live`
// mode agree. Timestamps are taken at different points of the receive path (and tcpdump's on
// another clock, which shifts the window grid), so the bounds are tolerant; the count is exact.
TEST_F(IatLive, LiveAndPcapOfTheSameTrafficAgree) {
  VethNetns n;
  const std::string cap = path("cap.pcap");
  // `ip netns exec` execs tcpdump in place: the child's pid is tcpdump's, for the SIGINT below.
  Child dump({"/usr/bin/env", "ip", "netns", "exec", n.ns_b, "tcpdump", "-i", n.if_b, "-n", "-Z",
              "root", "-U", "-w", cap, "--time-stamp-precision", "nano", "udp dst port 9000"},
             path("tcpdump.out"), path("tcpdump.err"));
  Child iat(live_args(n, "4s", path("l.json")), path("out"), path("err"));
  ASSERT_TRUE(n.wait_attached(false)) << iat.err();
  bool listening = false;
  for (int i = 0; i < 500 && !listening; ++i) {
    listening = dump.err().find("listening on") != std::string::npos;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(listening) << dump.err();
  send(n, "--burst 200 --within 2ms --every 50ms --count 5");
  ASSERT_EQ(iat.wait(30s), 0) << iat.err();
  ::kill(dump.pid(), SIGINT);
  ASSERT_EQ(dump.wait(10s), 0) << dump.err();

  auto r = sh(iat_ + " pcap " + cap + " --json " + path("p.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  auto live = nlohmann::json::parse(read_file(path("l.json")));
  auto pcap = nlohmann::json::parse(read_file(path("p.json")));
  EXPECT_EQ(live["packets"].get<uint64_t>(), 1000u);
  EXPECT_EQ(pcap["packets"].get<uint64_t>(), 1000u);
  EXPECT_TRUE(pcap["cv_exact"].get<bool>());
  EXPECT_EQ(pcap["ts_resolution_ns"].get<uint64_t>(), 1u);
  // The spans agree within a millisecond, the intra-burst and the inter-burst masses within
  // a few packets.
  const double ls = live["duration_s"].get<double>(), ps = pcap["duration_s"].get<double>();
  EXPECT_NEAR(ls, ps, 1e-3);
  EXPECT_NEAR(double(mass(live, 0, 1'048'576)), double(mass(pcap, 0, 1'048'576)), 10.0);
  EXPECT_NEAR(double(mass(live, 1'048'576, 1ull << 41)), double(mass(pcap, 1'048'576, 1ull << 41)),
              10.0);
  r = sh(iat_ + " compare " + path("l.json") + " " + path("p.json"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("one CV is exact"), std::string::npos) << r.out;
  n.expect_clean();
}

TEST_F(IatLive, ClearErrors) {
  VethNetns n;
  auto r = sh(iat_ + " live --iface nosuchif0 --netns " + n.ns_b + " --duration 1s");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("no such interface 'nosuchif0'"), std::string::npos) << r.out;
  r = sh(iat_ + " live --iface " + n.if_b + " --netns " + n.ns_b + " --filter-dst 10.0.0.300");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("bad filter"), std::string::npos) << r.out;
  r = sh(iat_ + " live --iface " + n.if_b + " --netns nosuchns" + std::to_string(::getpid()));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("no such network namespace"), std::string::npos) << r.out;
  // Without root: an unprivileged user with no capabilities.
  r = sh("setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all " + iat_ +
         " live --iface lo --duration 1s");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("needs root"), std::string::npos) << r.out;
  n.expect_clean();
}

// pcap mode and compare through the CLI, on a nanosecond capture of micro-bursts in miniature.
TEST_F(IatLive, PcapAndCompareCli) {
  const std::string cap = path("bursts.pcap");
  pcap_t* dead =
      pcap_open_dead_with_tstamp_precision(DLT_EN10MB, 65535, PCAP_TSTAMP_PRECISION_NANO);
  pcap_dumper_t* d = pcap_dump_open(dead, cap.c_str());
  ASSERT_NE(d, nullptr);
  std::vector<uint8_t> f(60, 0);
  f[12] = 0x08;
  f[14] = 0x45;
  f[23] = 17;  // UDP
  for (uint64_t i = 0; i < 400; ++i) {
    uint64_t ts = 1'700'000'000ull * 1'000'000'000ull + (i / 40) * 1'000'000 + (i % 40) * 1'000;
    uint16_t dport = i % 2 ? 9001 : 9000;
    f[36] = static_cast<uint8_t>(dport >> 8);
    f[37] = static_cast<uint8_t>(dport);
    pcap_pkthdr h{};
    h.ts.tv_sec = static_cast<time_t>(ts / 1'000'000'000ull);
    h.ts.tv_usec = static_cast<suseconds_t>(ts % 1'000'000'000ull);
    h.caplen = h.len = 60;
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data());
  }
  pcap_dump_close(d);
  pcap_close(dead);

  auto r = sh(iat_ + " pcap " + cap + " --json " + path("all.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("packets     400"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max 40 packets -> peak 400k/s"), std::string::npos) << r.out;
  r = sh(iat_ + " pcap " + cap + " --filter 'udp dst port 9000' --json " + path("half.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("packets     200"), std::string::npos) << r.out;
  r = sh(iat_ + " compare " + path("all.json") + " " + path("half.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  auto line = r.out.substr(r.out.find("\npackets ") + 1);
  line = line.substr(0, line.find('\n'));
  EXPECT_NE(line.find(" 400 "), std::string::npos) << r.out;
  EXPECT_NE(line.find(" 200 "), std::string::npos) << r.out;
  EXPECT_NE(line.find("-50.0% (x0.5)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max pkts/100us"), std::string::npos) << r.out;
  r = sh(iat_ + " pcap " + cap + " --filter 'udp dst port banana'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("does not parse"), std::string::npos) << r.out;
  r = sh(iat_ + " compare " + path("all.json") + " " + cap);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("is not JSON"), std::string::npos) << r.out;
}

}  // namespace
