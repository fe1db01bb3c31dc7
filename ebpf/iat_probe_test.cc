// Probe fixtures as Katran does: crafted frames run through the real tc and XDP programs with
// BPF_PROG_TEST_RUN, then the maps are read back through the loader. The tc runs inject the
// arrival time through __sk_buff.tstamp (Options::use_skb_tstamp), so gaps and windows are exact;
// the XDP runs use the real clock and are checked within the measured bounds. The last tests
// attach to veths in network namespaces of their own. Needs root and BPF.
#include "ebpf/iat_probe.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/netns.h"

namespace dripgate::ebpf {
namespace {

// ---- frame crafting ----

struct Pkt {
  int family = 4;
  std::string src = "10.1.2.3";
  std::string dst = "10.9.8.7";
  uint8_t proto = IPPROTO_UDP;
  uint16_t sport = 40000;
  uint16_t dport = 8080;
  size_t payload = 18;
  uint16_t vlan = 0;  // 802.1Q tag when nonzero
  bool later_fragment = false;
};

void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

std::vector<uint8_t> frame(const Pkt& p) {
  std::vector<uint8_t> b = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
  if (p.vlan) {
    put16(b, ETH_P_8021Q);
    put16(b, p.vlan);
  }
  const size_t l4len = (p.proto == IPPROTO_TCP ? 20 : 8) + p.payload;
  if (p.family == 4) {
    put16(b, ETH_P_IP);
    b.push_back(0x45);
    b.push_back(0);
    put16(b, static_cast<uint16_t>(20 + l4len));
    put16(b, 1);
    put16(b, p.later_fragment ? 185 : 0);  // fragment offset in 8-byte units
    b.push_back(64);
    b.push_back(p.proto);
    put16(b, 0);
    uint8_t a[4];
    inet_pton(AF_INET, p.src.c_str(), a);
    b.insert(b.end(), a, a + 4);
    inet_pton(AF_INET, p.dst.c_str(), a);
    b.insert(b.end(), a, a + 4);
  } else {
    put16(b, ETH_P_IPV6);
    b.insert(b.end(), {0x60, 0, 0, 0});
    put16(b, static_cast<uint16_t>(l4len));
    b.push_back(p.proto);
    b.push_back(64);
    uint8_t a[16];
    inet_pton(AF_INET6, p.src.c_str(), a);
    b.insert(b.end(), a, a + 16);
    inet_pton(AF_INET6, p.dst.c_str(), a);
    b.insert(b.end(), a, a + 16);
  }
  put16(b, p.sport);
  put16(b, p.dport);
  b.resize(b.size() + l4len - 4, 0);
  return b;
}

std::vector<uint8_t> arp_frame() {
  std::vector<uint8_t> b = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1};
  put16(b, ETH_P_ARP);
  b.resize(b.size() + 28, 0);
  return b;
}

Pkt v6(Pkt p) {
  p.family = 6;
  p.src = "fd00:1::3";
  p.dst = "fd00:9::7";
  return p;
}

// ---- running the programs ----

int run_tc(const IatProbe& probe, const std::vector<uint8_t>& f, uint64_t tstamp, int repeat = 1) {
  __sk_buff ctx{};
  ctx.tstamp = tstamp;
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = f.data(),
              .data_size_in = static_cast<uint32_t>(f.size()), .ctx_in = &ctx,
              .ctx_size_in = sizeof(ctx), .repeat = repeat);
  int err = bpf_prog_test_run_opts(probe.tc_prog_fd(), &o);
  if (err != 0) throw std::runtime_error("tc test run: " + std::string(std::strerror(-err)));
  return static_cast<int>(o.retval);
}

int run_xdp(const IatProbe& probe, const std::vector<uint8_t>& f) {
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = f.data(),
              .data_size_in = static_cast<uint32_t>(f.size()), .repeat = 1);
  int err = bpf_prog_test_run_opts(probe.xdp_prog_fd(), &o);
  if (err != 0) throw std::runtime_error("xdp test run: " + std::string(std::strerror(-err)));
  return static_cast<int>(o.retval);
}

uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t hist_sum(const Counters& s) {
  return std::accumulate(s.hist.begin(), s.hist.end(), uint64_t{0});
}

Options exact_clock(Filter f = {}) {
  Options o;
  o.filter = std::move(f);
  o.use_skb_tstamp = true;
  return o;
}

// Whether one frame passes `filter`, through the tc and the XDP program both.
bool passes(const Filter& filter, const std::vector<uint8_t>& f) {
  IatProbe probe(exact_clock(filter));
  EXPECT_EQ(run_tc(probe, f, 1000), TC_ACT_UNSPEC);
  EXPECT_EQ(run_xdp(probe, f), XDP_PASS);
  Counters s = probe.snapshot();
  EXPECT_EQ(s.totals.packets + s.totals.filtered_out, 2u);
  EXPECT_TRUE(s.totals.packets == 0 || s.totals.packets == 2) << "tc and XDP disagree";
  return s.totals.packets == 2;
}

// ---- filter logic ----

TEST(IatProbeFilter, EmptyFilterTakesEveryIpFrameAndNoArp) {
  Filter none;
  EXPECT_TRUE(passes(none, frame(Pkt{})));
  EXPECT_TRUE(passes(none, frame(v6(Pkt{}))));
  EXPECT_TRUE(passes(none, frame(Pkt{.proto = IPPROTO_TCP})));
  EXPECT_TRUE(passes(none, frame(Pkt{.proto = IPPROTO_ICMP})));
  EXPECT_FALSE(passes(none, arp_frame()));
  std::vector<uint8_t> truncated = frame(Pkt{});
  truncated.resize(14 + 12);  // BPF_PROG_TEST_RUN refuses such skbs; XDP takes them
  IatProbe probe(Options{});
  EXPECT_EQ(run_xdp(probe, truncated), XDP_PASS);
  EXPECT_EQ(probe.snapshot().totals.filtered_out, 1u) << "truncated IPv4 header";
  EXPECT_EQ(probe.snapshot().totals.packets, 0u);
}

TEST(IatProbeFilter, Ipv4Prefixes) {
  Filter f;
  f.dst = Prefix::parse("10.9.0.0/16");
  EXPECT_TRUE(passes(f, frame(Pkt{})));
  EXPECT_FALSE(passes(f, frame(Pkt{.dst = "10.10.8.7"})));
  EXPECT_FALSE(passes(f, frame(v6(Pkt{})))) << "an IPv4 prefix never matches IPv6";
  f.src = Prefix::parse("10.1.2.3");
  EXPECT_TRUE(passes(f, frame(Pkt{})));
  EXPECT_FALSE(passes(f, frame(Pkt{.src = "10.1.2.4"})));
  Filter any;
  any.src = Prefix::parse("0.0.0.0/0");
  EXPECT_TRUE(passes(any, frame(Pkt{.src = "192.168.1.1"})));
  EXPECT_FALSE(passes(any, frame(v6(Pkt{}))));
}

TEST(IatProbeFilter, Ipv6Prefixes) {
  Filter f;
  f.src = Prefix::parse("fd00:1::/32");
  EXPECT_TRUE(passes(f, frame(v6(Pkt{}))));
  Pkt other = v6(Pkt{});
  other.src = "fd00:2::3";
  EXPECT_FALSE(passes(f, frame(other)));
  EXPECT_FALSE(passes(f, frame(Pkt{})));
  Filter host;
  host.dst = Prefix::parse("fd00:9::7");
  EXPECT_TRUE(passes(host, frame(v6(Pkt{}))));
  Pkt last_bit = v6(Pkt{});
  last_bit.dst = "fd00:9::6";
  EXPECT_FALSE(passes(host, frame(last_bit)));
  Filter mixed;
  mixed.src = Prefix::parse("fd00::/8");
  mixed.dst = Prefix::parse("10.0.0.0/8");
  EXPECT_THROW(IatProbe{Options{.filter = mixed}}, std::invalid_argument);
}

TEST(IatProbeFilter, PortsAndProtocol) {
  Filter f;
  f.dst_port = PortRange::parse("8000-8100");
  EXPECT_TRUE(passes(f, frame(Pkt{})));
  EXPECT_TRUE(passes(f, frame(Pkt{.proto = IPPROTO_TCP, .dport = 8000})));
  EXPECT_TRUE(passes(f, frame(v6(Pkt{.dport = 8100}))));
  EXPECT_FALSE(passes(f, frame(Pkt{.dport = 8101})));
  EXPECT_FALSE(passes(f, frame(Pkt{.proto = IPPROTO_ICMP}))) << "no ports without TCP/UDP";
  EXPECT_FALSE(passes(f, frame(Pkt{.later_fragment = true}))) << "no ports in later fragments";
  std::vector<uint8_t> no_l4 = frame(Pkt{});
  no_l4.resize(14 + 20);
  EXPECT_FALSE(passes(f, no_l4)) << "ports cut off";
  EXPECT_TRUE(passes(Filter{}, no_l4));
  f.src_port = PortRange::parse("40000");
  EXPECT_TRUE(passes(f, frame(Pkt{})));
  EXPECT_FALSE(passes(f, frame(Pkt{.sport = 40001})));
  Filter tcp;
  tcp.protocol = IPPROTO_TCP;
  EXPECT_TRUE(passes(tcp, frame(Pkt{.proto = IPPROTO_TCP})));
  EXPECT_TRUE(passes(tcp, frame(v6(Pkt{.proto = IPPROTO_TCP}))));
  EXPECT_FALSE(passes(tcp, frame(Pkt{})));
  EXPECT_TRUE(passes(Filter{}, frame(Pkt{.later_fragment = true})));
}

TEST(IatProbeFilter, VlanTaggedFramesAreParsed) {
  Filter f;
  f.dst = Prefix::parse("10.9.8.0/24");
  f.dst_port = PortRange::parse("8080");
  EXPECT_TRUE(passes(f, frame(Pkt{.vlan = 42})));
  EXPECT_FALSE(passes(f, frame(Pkt{.dport = 9, .vlan = 42})));
}

TEST(IatProbeFilter, ParseErrorsAreClear) {
  EXPECT_THROW(Prefix::parse("10.0.0.0/33"), std::invalid_argument);
  EXPECT_THROW(Prefix::parse("10.0.0/8"), std::invalid_argument);
  EXPECT_THROW(Prefix::parse("fd00::/129"), std::invalid_argument);
  EXPECT_THROW(Prefix::parse("10.0.0.0/"), std::invalid_argument);
  EXPECT_THROW(PortRange::parse("70000"), std::invalid_argument);
  EXPECT_THROW(PortRange::parse("9-8"), std::invalid_argument);
  EXPECT_THROW(PortRange::parse("http"), std::invalid_argument);
  EXPECT_EQ(Prefix::parse("10.1.2.3/8").str(), "10.1.2.3/8");
  EXPECT_EQ(Prefix::parse("fd00::1").len, 128u);
}

// ---- map updates ----

TEST(IatProbeMaps, ExactGapsTotalsAndWindowsFromInjectedTimestamps) {
  IatProbe probe(exact_clock());
  const uint64_t base = 1'000'000'000'000;  // a multiple of both window widths
  const std::vector<uint64_t> at = {0, 10, 20, 150'000, 160'000, 350'000, 1'200'000};
  const auto f = frame(Pkt{});
  for (uint64_t t : at) run_tc(probe, f, base + t);
  run_tc(probe, arp_frame(), base + 1'300'000);

  Counters s = probe.snapshot();
  EXPECT_EQ(s.totals.packets, at.size());
  EXPECT_EQ(s.totals.bytes, at.size() * f.size());
  EXPECT_EQ(s.totals.first_ns, base);
  EXPECT_EQ(s.totals.last_ns, base + 1'200'000);
  EXPECT_EQ(s.totals.filtered_out, 1u);

  std::array<uint64_t, IAT_BUCKETS> want{};
  for (size_t i = 1; i < at.size(); ++i) ++want[iat_bucket(at[i] - at[i - 1])];
  EXPECT_EQ(s.hist, want);
  EXPECT_EQ(s.hist[iat_bucket(10)], 2u);

  // 100 us windows: 3 | 2 | (empty) | 1 | ... | 1 (open).
  const iat_window& w0 = s.windows[0];
  EXPECT_EQ(w0.width_ns, 100'000u);
  EXPECT_EQ(w0.windows, 3u);
  EXPECT_EQ(w0.max_count, 3u);
  EXPECT_EQ(w0.cur_count, 1u);
  EXPECT_EQ(w0.cur_start_ns, base + 1'200'000);
  std::array<uint64_t, IAT_COUNT_BUCKETS> want0{};
  want0[iat_count_bucket(3)] = want0[iat_count_bucket(2)] = want0[iat_count_bucket(1)] = 1;
  EXPECT_EQ(s.count_hist[0], want0);
  // 1 ms windows: 6 | 1 (open).
  const iat_window& w1 = s.windows[1];
  EXPECT_EQ(w1.width_ns, 1'000'000u);
  EXPECT_EQ(w1.windows, 1u);
  EXPECT_EQ(w1.max_count, 6u);
  EXPECT_EQ(w1.cur_count, 1u);
  EXPECT_EQ(w1.cur_start_ns, base + 1'000'000);
  std::array<uint64_t, IAT_COUNT_BUCKETS> want1{};
  want1[iat_count_bucket(6)] = 1;
  EXPECT_EQ(s.count_hist[1], want1);
}

TEST(IatProbeMaps, ConcurrentCpusShareOneTimelineAndLoseNoCount) {
  // Two threads on two CPUs run the program at once with the same arrival time: every gap is 0,
  // exactly one packet is the first, and the shared window counts every packet (or says it lost
  // it: the compare-and-swap gives up after a few retries).
  IatProbe probe(exact_clock());
  const auto f = frame(Pkt{});
  constexpr int kRepeat = 200'000;
  const uint64_t t = 42'000'000'000;
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2);
  for (int c = 0; c < 2; ++c)
    threads.emplace_back([&, c] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(static_cast<int>(c % (ncpu > 0 ? ncpu : 1)), &set);
      pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      try {
        run_tc(probe, f, t, kRepeat);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(c)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(errors, std::vector<std::string>(2));
  Counters s = probe.snapshot();
  EXPECT_EQ(s.totals.packets, 2u * kRepeat);
  EXPECT_EQ(s.totals.first_ns, t);
  EXPECT_EQ(s.totals.last_ns, t);
  EXPECT_EQ(s.hist[0], 2u * kRepeat - 1);
  EXPECT_EQ(hist_sum(s), 2u * kRepeat - 1);
  std::printf("packets lost to window contention: %llu, %llu\n",
              static_cast<unsigned long long>(s.window_lost[0]),
              static_cast<unsigned long long>(s.window_lost[1]));
  for (unsigned i = 0; i < IAT_WINDOWS; ++i) {
    if (s.windows[i].width_ns == 0) continue;  // off by default (the third, serve's 10 ms)
    EXPECT_EQ(s.windows[i].cur_count + s.window_lost[i], 2u * kRepeat) << "window " << i;
    EXPECT_EQ(s.windows[i].max_count, s.windows[i].cur_count);
    EXPECT_EQ(s.windows[i].windows, 0u);
    EXPECT_EQ(s.windows[i].cur_start_ns, t - t % s.windows[i].width_ns);
  }
}

TEST(IatProbeMaps, WindowWidthsComeFromOptionsAndZeroDisables) {
  Options o = exact_clock();
  o.windows_ns = {10'000, 0};
  IatProbe probe(o);
  const auto f = frame(Pkt{});
  for (uint64_t t : {0, 1, 2, 3, 4, 10'000, 10'001})
    run_tc(probe, f, 1'000'000'000 + static_cast<uint64_t>(t));
  Counters s = probe.snapshot();
  EXPECT_EQ(s.windows[0].max_count, 5u);
  EXPECT_EQ(s.windows[0].windows, 1u);
  EXPECT_EQ(s.windows[0].cur_count, 2u);
  EXPECT_EQ(s.count_hist[0][iat_count_bucket(5)], 1u);
  EXPECT_EQ(s.windows[1].width_ns, 0u);
  EXPECT_EQ(s.windows[1].cur_count, 0u);
  EXPECT_EQ(s.windows[1].max_count, 0u);
  EXPECT_EQ(s.hist[iat_bucket(1)], 5u);
  EXPECT_EQ(s.hist[iat_bucket(9'996)], 1u);
}

// serve's three windows, and their peaks taken period by period: each take returns the most
// packets in one window since the previous take and starts the next period at 0; a window open
// across a take counts whole in the next period.
TEST(IatProbeMaps, ThreeWindowsAndPeaksTakenPeriodByPeriod) {
  Options o = exact_clock();
  o.windows_ns = {10'000, 100'000, 1'000'000};
  IatProbe probe(o);
  const auto f = frame(Pkt{});
  const uint64_t base = 1'000'000'000'000;
  for (uint64_t t : {0, 1, 2, 3, 50'000, 60'000}) run_tc(probe, f, base + t);
  EXPECT_EQ(probe.take_window_peaks(), (std::array<uint64_t, IAT_WINDOWS>{4, 6, 6}));
  EXPECT_EQ(probe.take_window_peaks(), (std::array<uint64_t, IAT_WINDOWS>{0, 0, 0}));
  for (uint64_t t : {70'000, 200'000, 200'001}) run_tc(probe, f, base + t);
  // 10 us: 1 then 2; 100 us: the open window [0, 100 us) now holds 7, then 2; 1 ms: 9 in all.
  EXPECT_EQ(probe.take_window_peaks(), (std::array<uint64_t, IAT_WINDOWS>{2, 7, 9}));
  const Counters s = probe.snapshot();
  EXPECT_EQ(s.windows[2].width_ns, 1'000'000u);
  EXPECT_EQ(s.windows[2].cur_count, 9u);
  EXPECT_EQ(s.windows[0].windows, 4u);
}

TEST(IatProbeMaps, WindowIndexWrapStillOpensANewWindow) {
  Options o = exact_clock();
  o.windows_ns = {1'000, 0};
  IatProbe probe(o);
  const auto f = frame(Pkt{});
  const uint64_t wrap = (uint64_t{1} << (64 - IAT_WIN_COUNT_BITS)) * 1'000;  // index 2^40 -> 0
  run_tc(probe, f, wrap - 1'000);
  run_tc(probe, f, wrap - 999);
  run_tc(probe, f, wrap + 5);
  Counters s = probe.snapshot();
  EXPECT_EQ(s.windows[0].windows, 1u);
  EXPECT_EQ(s.count_hist[0][iat_count_bucket(2)], 1u);
  EXPECT_EQ(s.windows[0].cur_count, 1u);
  EXPECT_EQ(s.windows[0].max_count, 2u);
  EXPECT_EQ(s.windows[0].cur_start_ns, wrap);
}

TEST(IatProbeMaps, LongGapsLandInTheTopBuckets) {
  IatProbe probe(exact_clock());
  const auto f = frame(Pkt{});
  const uint64_t t0 = 5'000'000'000;
  run_tc(probe, f, t0);
  run_tc(probe, f, t0 + 12'000'000'000);                 // 12 s
  run_tc(probe, f, t0 + 12'000'000'000 + (1ull << 41));  // beyond 2^40 ns
  Counters s = probe.snapshot();
  EXPECT_EQ(s.hist[iat_bucket(12'000'000'000)], 1u);
  EXPECT_EQ(s.hist[IAT_BUCKETS - 1], 1u);
  EXPECT_EQ(hist_sum(s), 2u);
}

TEST(IatProbeMaps, TcUsesTheKernelClockWithoutInjectedTimestamps) {
  IatProbe probe(Options{});  // use_skb_tstamp off: the tstamp we pass must be ignored
  const auto f = frame(Pkt{});
  const uint64_t a0 = mono_ns();
  run_tc(probe, f, 7);
  const uint64_t a1 = mono_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  const uint64_t b0 = mono_ns();
  run_tc(probe, f, 8);
  const uint64_t b1 = mono_ns();
  Counters s = probe.snapshot();
  EXPECT_GE(s.totals.first_ns, a0);
  EXPECT_LE(s.totals.first_ns, a1);
  EXPECT_GE(s.totals.last_ns, b0);
  EXPECT_LE(s.totals.last_ns, b1);
  ASSERT_EQ(hist_sum(s), 1u);
  const uint64_t gap = s.totals.last_ns - s.totals.first_ns;
  EXPECT_EQ(s.hist[iat_bucket(gap)], 1u);
  EXPECT_GE(gap, b0 - a1);
  EXPECT_LE(gap, b1 - a0);
}

TEST(IatProbeMaps, XdpCountsExactlyAndTheGapWithinTheMeasuredBounds) {
  Filter f;
  f.protocol = IPPROTO_UDP;
  IatProbe probe(Options{.filter = f});
  const auto udp = frame(Pkt{});
  const auto tcp = frame(Pkt{.proto = IPPROTO_TCP, .payload = 100});
  const uint64_t a0 = mono_ns();
  EXPECT_EQ(run_xdp(probe, udp), XDP_PASS);
  const uint64_t a1 = mono_ns();
  EXPECT_EQ(run_xdp(probe, tcp), XDP_PASS);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const uint64_t b0 = mono_ns();
  EXPECT_EQ(run_xdp(probe, udp), XDP_PASS);
  const uint64_t b1 = mono_ns();
  Counters s = probe.snapshot();
  EXPECT_EQ(s.totals.packets, 2u);
  EXPECT_EQ(s.totals.filtered_out, 1u);
  EXPECT_EQ(s.totals.bytes, 2 * udp.size());
  ASSERT_EQ(hist_sum(s), 1u);
  unsigned bucket = 0;
  while (s.hist[bucket] == 0) ++bucket;
  EXPECT_GE(bucket, iat_bucket(b0 - a1));
  EXPECT_LE(bucket, iat_bucket(b1 - a0));
  EXPECT_EQ(s.windows[1].max_count, 1u + (b1 / 1'000'000 == a0 / 1'000'000 ? 1u : 0u));
}

// ---- errors ----

TEST(IatProbeErrors, UnknownInterfaceAndNamespaceSayWhat) {
  IatProbe probe(Options{});
  try {
    probe.attach_tc(Interface::resolve("dgp-nonexistent"), Direction::kIngress);
    ADD_FAILURE() << "attach to a missing interface succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no such interface 'dgp-nonexistent'"), std::string::npos)
        << e.what();
  }
  try {
    probe.attach_tc(Interface{999'999, ""}, Direction::kIngress);
    ADD_FAILURE() << "attach to a missing ifindex succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no such interface"), std::string::npos) << e.what();
  }
  EXPECT_THROW(probe.attach_xdp(Interface{999'999, ""}), std::runtime_error);
  try {
    probe.attach_tc(Interface::resolve("lo", "dgp-no-such-netns"), Direction::kIngress);
    ADD_FAILURE() << "attach in a missing netns succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no such network namespace"), std::string::npos)
        << e.what();
  }
}

TEST(IatProbeErrors, NotRootIsReportedAsSuch) {
  // A child drops to nobody and tries to load; it reports through its exit code.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    try {
      IatProbe probe(Options{});
      _exit(2);
    } catch (const std::runtime_error& e) {
      _exit(std::string(e.what()).find("need root") != std::string::npos ? 0 : 1);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: message without 'need root', 2: loaded as nobody";
}

// ---- attaching in network namespaces ----

int sh(const std::string& cmd) {
  return ::dripgate::testing::run_shell(cmd + " >/dev/null 2>&1").status;
}

std::string out(const std::string& cmd) {
  return ::dripgate::testing::run_shell(cmd + " 2>&1").out;
}

// Two namespaces joined by a veth pair: a (10.77.x.1) -> b (10.77.x.2). tests/netns.h removes
// them on destruction, and leftovers of dead test processes on construction.
class TestNet {
  ::dripgate::testing::TestNetns net_{"dgprobe"};  // first: the names below come from it

 public:
  TestNet() {
    const std::string net = "10.77." + std::to_string(getpid() % 250) + ".";
    ip_b = net + "2";
    net_.add_veth({a, va, net + "1/24", ""}, {b, vb, ip_b + "/24", ""});
    // resolve the neighbour now, so no datagram of a test waits in the ARP queue
    ::dripgate::testing::run_checked("ip netns exec " + a + " ping -c 1 -W 2 " + ip_b);
  }

  std::string tc_b(const std::string& args) const {
    return out("ip netns exec " + b + " tc " + args);
  }

  // Sends n UDP datagrams from namespace a to b:port.
  void send_udp(int n, uint16_t port) const {
    int fd;
    {
      NetnsGuard in(a);
      fd = socket(AF_INET, SOCK_DGRAM, 0);
    }
    ASSERT_GE(fd, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    inet_pton(AF_INET, ip_b.c_str(), &to.sin_addr);
    char payload[64] = {};
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(
          sendto(fd, payload, sizeof(payload), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
          static_cast<ssize_t>(sizeof(payload)));
    close(fd);
  }

  const std::string a = net_.add_netns("-a"), b = net_.add_netns("-b");
  const std::string va = net_.name("a"), vb = net_.name("b");
  std::string ip_b;
};

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(IatProbeAttach, TcAttachIsIdempotentAndDetachLeavesNothing) {
  TestNet net;
  {
    IatProbe probe(Options{});
    probe.attach_tc(Interface::resolve(net.vb, net.b), Direction::kIngress);
    probe.attach_tc(Interface::resolve(net.vb, net.b), Direction::kIngress);  // no-op
    const std::string shown = net.tc_b("filter show dev " + net.vb + " ingress");
    EXPECT_EQ(count_of(shown, "handle 0xd1a7"), 1u) << shown;
    EXPECT_NE(net.tc_b("qdisc show dev " + net.vb).find("clsact"), std::string::npos);

    // A second probe finds our handle taken and says so, without touching the first.
    IatProbe other(Options{});
    try {
      other.attach_tc(Interface::resolve(net.vb, net.b), Direction::kIngress);
      ADD_FAILURE() << "second probe attached over the first";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("held by another program"), std::string::npos)
          << e.what();
    }
    other.detach();
    EXPECT_EQ(count_of(net.tc_b("filter show dev " + net.vb + " ingress"), "handle 0xd1a7"), 1u);

    probe.detach();
    probe.detach();  // idempotent
  }
  EXPECT_EQ(net.tc_b("filter show dev " + net.vb + " ingress"), "");
  EXPECT_EQ(net.tc_b("qdisc show dev " + net.vb).find("clsact"), std::string::npos)
      << "the clsact qdisc we created must go";
}

TEST(IatProbeAttach, ForeignFiltersAndQdiscsSurviveOurDetach) {
  TestNet net;
  // Someone else's qdisc and filter first: neither is ours to remove.
  ASSERT_EQ(sh("ip netns exec " + net.b + " tc qdisc add dev " + net.vb + " clsact"), 0);
  ASSERT_EQ(sh("ip netns exec " + net.b + " tc filter add dev " + net.vb +
               " ingress pref 7 protocol all bpf bytecode '1,6 0 0 0,'"),
            0);
  {
    IatProbe probe(Options{});
    probe.attach_tc(Interface::resolve(net.vb, net.b), Direction::kIngress);
    probe.attach_tc(Interface::resolve(net.vb, net.b), Direction::kEgress);
  }
  std::string shown = net.tc_b("filter show dev " + net.vb + " ingress");
  EXPECT_NE(shown.find("bytecode"), std::string::npos) << shown;
  EXPECT_EQ(shown.find("0xd1a7"), std::string::npos) << shown;
  EXPECT_EQ(net.tc_b("filter show dev " + net.vb + " egress"), "");
  EXPECT_NE(net.tc_b("qdisc show dev " + net.vb).find("clsact"), std::string::npos);

  // Now we create the qdisc and someone adds a filter to it while we are attached: our detach
  // must keep both their filter and the qdisc it hangs on.
  ASSERT_EQ(sh("ip netns exec " + net.b + " tc qdisc del dev " + net.vb + " clsact"), 0);
  {
    IatProbe probe(Options{});
    probe.attach_tc(Interface::resolve(net.vb, net.b), Direction::kIngress);
    ASSERT_EQ(sh("ip netns exec " + net.b + " tc filter add dev " + net.vb +
                 " egress pref 9 protocol all bpf bytecode '1,6 0 0 0,'"),
              0);
  }
  shown = net.tc_b("filter show dev " + net.vb + " egress");
  EXPECT_NE(shown.find("bytecode"), std::string::npos) << shown;
  EXPECT_EQ(net.tc_b("filter show dev " + net.vb + " ingress"), "");
}

TEST(IatProbeAttach, LiveTrafficOnTcAndXdpCountsEveryDatagram) {
  TestNet net;
  Filter f;
  f.dst_port = PortRange::parse("9999");
  f.protocol = IPPROTO_UDP;
  constexpr int kN = 300;
  {
    IatProbe tc(Options{.filter = f});
    tc.attach_tc(Interface::resolve(net.vb, net.b), Direction::kIngress);
    IatProbe xdp(Options{.filter = f});
    xdp.attach_xdp(Interface::resolve(net.vb, net.b));
    net.send_udp(kN, 9999);
    net.send_udp(10, 9998);  // filtered out
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (const IatProbe* p : {&tc, &xdp}) {
      Counters s = p->snapshot();
      EXPECT_EQ(s.totals.packets, static_cast<uint64_t>(kN));
      EXPECT_GE(s.totals.filtered_out, 10u);
      EXPECT_EQ(hist_sum(s), static_cast<uint64_t>(kN - 1));
      EXPECT_EQ(s.totals.bytes, kN * (14u + 20u + 8u + 64u));
      EXPECT_GE(s.windows[1].max_count, 1u);
      EXPECT_GT(s.totals.last_ns, s.totals.first_ns);
    }
    EXPECT_NE(out("ip -n " + net.b + " link show " + net.vb).find("xdp"), std::string::npos);
  }
  EXPECT_EQ(out("ip -n " + net.b + " link show " + net.vb).find("xdp"), std::string::npos)
      << "the XDP link must be gone";
  EXPECT_EQ(net.tc_b("filter show dev " + net.vb + " ingress"), "");
}

}  // namespace
}  // namespace dripgate::ebpf
