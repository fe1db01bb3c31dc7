// Holds the probe attached for a while, for tools/bench/probe_cost.sh: the kernel's own
// accounting (kernel.bpf_stats_enabled, run_time_ns / run_cnt) gives the cost per packet.
// Prints the program id first (so the script can find it), then what the probe counted.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <exception>
#include <thread>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_ether.h>

#include <vector>

#include "ebpf/iat_probe.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

// Mean ns per run of a program over `repeat` BPF_PROG_TEST_RUN iterations on one UDP/IPv4 frame
// (the kernel times the loop; no traffic, no bpf_stats needed).
uint32_t test_run_ns(int prog_fd, uint32_t repeat) {
  std::vector<uint8_t> f = {0x02, 0, 0,  0,  0, 2, 0x02, 0,    0,    0,    0, 1,  0x08, 0x00,
                            0x45, 0, 0,  46, 0, 1, 0,    0,    64,   17,   0, 0,  10,   0,
                            0,    1, 10, 0,  0, 2, 0x9c, 0x40, 0x23, 0x28, 0, 26, 0,    0};
  f.resize(14 + 46, 0);
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = f.data(),
              .data_size_in = static_cast<uint32_t>(f.size()), .repeat = static_cast<int>(repeat));
  if (int err = bpf_prog_test_run_opts(prog_fd, &o); err != 0)
    throw std::runtime_error("BPF_PROG_TEST_RUN failed: " + std::to_string(err));
  return o.duration;
}
}  // namespace

int main(int argc, char** argv) {
  namespace ebpf = dripgate::ebpf;
  CLI::App app("attach the inter-arrival probe for a while and print what it counted");
  std::string iface, netns, dport;
  bool xdp = false;
  double seconds = 5;
  uint32_t test_runs = 0;
  app.add_option("--iface", iface, "interface");
  app.add_option("--test-run", test_runs,
                 "no attach: time N BPF_PROG_TEST_RUN iterations of each program and exit");
  app.add_option("--netns", netns, "network namespace (under /run/netns)");
  app.add_flag("--xdp", xdp, "attach the XDP program instead of tc ingress");
  app.add_option("--dport", dport, "destination port filter, e.g. 9000 or 9000-9010");
  app.add_option("--seconds", seconds, "how long to stay attached");
  CLI11_PARSE(app, argc, argv);

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  try {
    ebpf::Options opts;
    if (!dport.empty()) opts.filter.dst_port = ebpf::PortRange::parse(dport);
    ebpf::IatProbe probe(opts);
    if (test_runs > 0) {
      std::printf("test_run tc  %u ns/run\n", test_run_ns(probe.tc_prog_fd(), test_runs));
      std::printf("test_run xdp %u ns/run\n", test_run_ns(probe.xdp_prog_fd(), test_runs));
      return 0;
    }
    if (iface.empty()) throw std::runtime_error("--iface is required");
    const auto at = ebpf::Interface::resolve(iface, netns);
    if (xdp)
      probe.attach_xdp(at);
    else
      probe.attach_tc(at, ebpf::Direction::kIngress);
    std::printf("prog_id %u\n", xdp ? probe.xdp_prog_id() : probe.tc_prog_id());
    std::fflush(stdout);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!g_stop && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const ebpf::Counters s = probe.snapshot();
    probe.detach();
    std::printf("packets %" PRIu64 " filtered_out %" PRIu64 " max_per_100us %" PRIu64
                " max_per_1ms %" PRIu64 "\n",
                s.totals.packets, s.totals.filtered_out, s.windows[0].max_count,
                s.windows[1].max_count);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "iat_probe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
