// dripgate-receiver: the inference cluster's side of the lab. Reads the agents' request
// datagrams with the kernel's receive timestamps (SO_TIMESTAMPNS) into a large socket buffer,
// counts what that buffer lost (SO_RXQ_OVFL) apart, and on SIGINT/SIGTERM (or after
// --duration) runs the NIC ring model (ring_model.h) over the stamps and writes what the
// cluster got: delivered, dropped by the ring, per tenant (with each tenant's delay from the
// agent's send() to the receive stamp), and the arrival figures.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include <fmt/format.h>

#include "tools/lab/lab_common.h"
#include "tools/lab/ring_model.h"

namespace dripgate::lab {
namespace {

using nlohmann::json;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

struct Arrival {
  uint64_t t_ns;
  uint16_t tenant;
  uint64_t sent_ns;  // the agent's CLOCK_MONOTONIC stamp when it called send()
};

struct Capture {
  std::vector<Arrival> arrivals;
  uint64_t kernel_drops = 0;  // the socket buffer overflowed: lost before any stamp was read
  uint64_t foreign = 0;       // datagrams that were not the agents' requests
};

OwnedFd open_socket(const Endpoint& at) {
  OwnedFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  const int one = 1, buf = 64 << 20;
  // FORCE: past net.core.rmem_max, so no burst overflows the buffer of this model.
  if (::setsockopt(s.get(), SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf)) != 0)
    ::setsockopt(s.get(), SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  ::setsockopt(s.get(), SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
  ::setsockopt(s.get(), SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(at.port);
  if (::inet_pton(AF_INET, at.host.c_str(), &a.sin_addr) != 1 ||
      ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    throw std::runtime_error(fmt::format("bind {}:{}: {}", at.host, at.port, std::strerror(errno)));
  return s;
}

// Reads until stopped; each datagram with its kernel stamp (CLOCK_REALTIME, ns).
void capture(int fd, uint64_t deadline_ns, Capture& c) {
  constexpr unsigned kBatch = 64;
  std::vector<std::array<char, 2048>> bufs(kBatch);
  std::vector<std::array<char, 256>> ctl(kBatch);
  std::vector<iovec> iov(kBatch);
  std::vector<mmsghdr> msgs(kBatch);
  while (!g_stop && monotonic_ns() < deadline_ns) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    for (unsigned i = 0; i < kBatch; ++i) {
      iov[i] = {bufs[i].data(), bufs[i].size()};
      msgs[i].msg_hdr = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = ctl[i].data();
      msgs[i].msg_hdr.msg_controllen = ctl[i].size();
    }
    const int n = ::recvmmsg(fd, msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
    for (int i = 0; i < n; ++i) {
      uint64_t t = 0;
      for (cmsghdr* cm = CMSG_FIRSTHDR(&msgs[i].msg_hdr); cm != nullptr;
           cm = CMSG_NXTHDR(&msgs[i].msg_hdr, cm)) {
        if (cm->cmsg_level != SOL_SOCKET) continue;
        if (cm->cmsg_type == SCM_TIMESTAMPNS) {
          timespec ts;
          std::memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
          t = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull +
              static_cast<uint64_t>(ts.tv_nsec);
        } else if (cm->cmsg_type == SO_RXQ_OVFL) {
          uint32_t drops;
          std::memcpy(&drops, CMSG_DATA(cm), sizeof(drops));
          c.kernel_drops = drops;  // cumulative for the socket
        }
      }
      RequestHeader h;
      if (msgs[i].msg_len < sizeof(h) || t == 0) {
        ++c.foreign;
        continue;
      }
      std::memcpy(&h, bufs[i].data(), sizeof(h));
      if (h.magic != RequestHeader::kMagic) {
        ++c.foreign;
        continue;
      }
      c.arrivals.push_back({t, h.tenant, h.sent_ns});
    }
  }
}

// CLOCK_REALTIME minus CLOCK_MONOTONIC, read between two monotonic reads: turns a kernel
// receive stamp into the agents' clock (every namespace shares both clocks).
int64_t realtime_minus_monotonic() {
  timespec m0, r, m1;
  ::clock_gettime(CLOCK_MONOTONIC, &m0);
  ::clock_gettime(CLOCK_REALTIME, &r);
  ::clock_gettime(CLOCK_MONOTONIC, &m1);
  const auto ns = [](const timespec& t) {
    return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
  };
  return ns(r) - (ns(m0) + ns(m1)) / 2;
}

// The p-th percentile (0..1) of v by the nearest rank; 0 for none.
uint64_t percentile(std::vector<uint64_t>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p * v.size())) - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

json report(Capture& c, uint32_t descriptors, double drain_pps, double reference_pps) {
  const int64_t clock_offset = realtime_minus_monotonic();
  std::sort(c.arrivals.begin(), c.arrivals.end(),
            [](const Arrival& a, const Arrival& b) { return a.t_ns < b.t_ns; });
  RingModel ring(descriptors, drain_pps);
  std::vector<uint64_t> stamps;
  std::vector<std::pair<uint64_t, uint64_t>> per_tenant;  // received, ring drops
  std::vector<std::vector<uint64_t>> delays;              // per tenant: send -> receive stamp
  uint64_t drops = 0;
  for (const Arrival& a : c.arrivals) {
    stamps.push_back(a.t_ns);
    if (a.tenant >= per_tenant.size()) {
      per_tenant.resize(a.tenant + 1u);
      delays.resize(a.tenant + 1u);
    }
    ++per_tenant[a.tenant].first;
    const int64_t d = static_cast<int64_t>(a.t_ns) - clock_offset - static_cast<int64_t>(a.sent_ns);
    delays[a.tenant].push_back(d > 0 ? static_cast<uint64_t>(d) : 0);
    if (!ring.arrive(a.t_ns)) {
      ++drops;
      ++per_tenant[a.tenant].second;
    }
  }
  const ArrivalFigures f = arrival_figures(stamps, reference_pps);
  json tenants = json::array();
  for (size_t i = 0; i < per_tenant.size(); ++i)
    tenants.push_back({{"index", i},
                       {"received", per_tenant[i].first},
                       {"ring_dropped", per_tenant[i].second},
                       {"delivered", per_tenant[i].first - per_tenant[i].second},
                       {"delay_p50_ns", percentile(delays[i], 0.50)},
                       {"delay_p99_ns", percentile(delays[i], 0.99)}});
  return {{"received", stamps.size()},
          {"ring_dropped", drops},
          {"delivered", stamps.size() - drops},
          {"kernel_dropped", c.kernel_drops},
          {"foreign", c.foreign},
          {"ring",
           {{"descriptors", descriptors}, {"drain_pps", drain_pps}, {"max_fill", ring.max_fill()}}},
          {"tenants", tenants},
          {"reference_pps", reference_pps},
          {"iat_p50_ns", f.iat_p50_ns},
          {"iat_p99_ns", f.iat_p99_ns},
          {"jitter_p99_ns", f.jitter_p99_ns},
          {"peak_100us", f.peak_100us},
          {"peak_1ms", f.peak_1ms},
          {"peak_10ms", f.peak_10ms},
          {"burst_factor", f.burst_factor}};
}

int run(int argc, char** argv) {
  CLI::App app{"dripgate-receiver: an inference NIC's receive ring, modelled on kernel stamps"};
  std::string listen, netns, json_path;
  uint32_t descriptors = 256;
  double drain_pps = 2000, reference_pps = 0, duration_s = 0;
  app.add_option("--listen", listen, "address:port the requests arrive at")->required();
  app.add_option("--netns", netns, "run inside this network namespace");
  app.add_option("--ring", descriptors, "receive descriptors of the modelled NIC")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--rate", drain_pps, "requests per second the cluster takes off the ring")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--reference-pps", reference_pps,
                 "the rate the burst factor and jitter are measured against (default: --rate)");
  app.add_option("--duration", duration_s, "stop after this many seconds (default: on a signal)");
  app.add_option("--json", json_path, "write the result here (default: stdout)");
  CLI11_PARSE(app, argc, argv);
  if (reference_pps <= 0) reference_pps = drain_pps;

  struct sigaction sa {};
  sa.sa_handler = on_signal;  // no SA_RESTART: poll returns at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (!netns.empty()) enter_netns(netns);
  OwnedFd s = open_socket(parse_endpoint(listen));
  Capture c;
  c.arrivals.reserve(1 << 20);
  const uint64_t deadline =
      duration_s > 0 ? monotonic_ns() + static_cast<uint64_t>(duration_s * 1e9) : UINT64_MAX;
  capture(s.get(), deadline, c);
  const std::string out = report(c, descriptors, drain_pps, reference_pps).dump(2) + "\n";
  if (json_path.empty())
    std::cout << out;
  else
    std::ofstream(json_path) << out;
  return 0;
}

}  // namespace
}  // namespace dripgate::lab

int main(int argc, char** argv) {
  return dripgate::lab::guarded_main("dripgate-receiver", dripgate::lab::run, argc, argv);
}
