// dripgate-iat: the inter-arrival profiler. `live` attaches the eBPF probe to an interface for a
// while, `serve` keeps it attached and serves Prometheus metrics, `pcap` reads a capture,
// `compare` sets two saved profiles side by side.
#include <linux/if_link.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "ebpf/iat_probe.h"
#include "tools/iat/builder.h"
#include "tools/iat/compare.h"
#include "tools/iat/json.h"
#include "tools/iat/pcap.h"
#include "tools/iat/serve.h"
#include "tools/iat/svg.h"
#include "tools/iat/text.h"
#include "tools/iat/units.h"

namespace dripgate::iat {
namespace {

constexpr unsigned long kBpfFsMagic = 0xcafe4a11;

struct Output {
  std::string json_path;
  std::string svg_path;
  bool quiet = false;
};

void add_output_options(CLI::App* sub, Output& out) {
  sub->add_option("--json", out.json_path,
                  "write every figure and the raw buckets here ('-': stdout)");
  sub->add_option("--svg", out.svg_path, "write a chart of the histogram and window counts here");
  sub->add_flag("--quiet", out.quiet, "no text report on stdout");
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f)
    throw std::runtime_error(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
}

void emit(const Profile& p, const Output& out) {
  if (out.json_path == "-") {
    std::cout << to_json(p).dump(2) << "\n";
  } else {
    if (!out.quiet) std::cout << render_text(p);
    if (!out.json_path.empty()) write_file(out.json_path, to_json(p).dump(2) + "\n");
  }
  if (!out.svg_path.empty()) write_file(out.svg_path, render_svg(p));
}

uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Root, or the capabilities the probe needs (CAP_NET_ADMIN for tc, CAP_BPF or CAP_SYS_ADMIN).
bool may_load_bpf() {
  if (::geteuid() == 0) return true;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    unsigned long long caps = std::stoull(line.substr(7), nullptr, 16);
    bool net_admin = caps & (1ull << 12), sys_admin = caps & (1ull << 21),
         bpf = caps & (1ull << 39);
    return net_admin && (bpf || sys_admin);
  }
  return false;
}

// The signals that end a run early. Blocked for the whole live run, then taken synchronously
// with sigtimedwait: no handler can interrupt the detach path, so it always runs.
sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGHUP);
  return s;
}

struct LiveArgs {
  std::string iface, netns, direction = "ingress", duration = "5s", windows = "100us,1ms";
  bool xdp = false;
  std::string xdp_mode = "auto";
  std::string src, dst, sport, dport, proto;
};

// A live run with every argument parsed and the interface resolved: what the probe is handed.
struct LiveSpec {
  ebpf::Options options;
  ebpf::Interface at;
  bool xdp = false;
  uint32_t xdp_flags = 0;
  ebpf::Direction dir = ebpf::Direction::kIngress;
  uint64_t duration_ns = 0;
  std::string where;  // "IF (netns NS) tc ingress, filter dst 10.0.0.0/8"
};

uint8_t parse_proto(const std::string& name) {
  if (name == "tcp") return IPPROTO_TCP;
  if (name == "udp") return IPPROTO_UDP;
  if (name == "sctp") return IPPROTO_SCTP;
  if (name == "icmp") return IPPROTO_ICMP;
  throw std::runtime_error(
      fmt::format("bad filter: --filter-proto '{}' (use tcp, udp, sctp or icmp)", name));
}

// The filter options, and how the report names them (" src 10.0.0.0/8 dport 53").
ebpf::Filter parse_filter(const LiveArgs& a, std::string& text) {
  ebpf::Filter f;
  try {
    if (!a.src.empty()) f.src = ebpf::Prefix::parse(a.src);
    if (!a.dst.empty()) f.dst = ebpf::Prefix::parse(a.dst);
    if (!a.sport.empty()) f.src_port = ebpf::PortRange::parse(a.sport);
    if (!a.dport.empty()) f.dst_port = ebpf::PortRange::parse(a.dport);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(fmt::format("bad filter: {}", e.what()));
  }
  if (!a.proto.empty()) f.protocol = parse_proto(a.proto);
  for (const auto& [name, v] :
       {std::pair{"src", a.src}, std::pair{"dst", a.dst}, std::pair{"sport", a.sport},
        std::pair{"dport", a.dport}, std::pair{"proto", a.proto}})
    if (!v.empty()) text += fmt::format(" {} {}", name, v);
  return f;
}

LiveSpec parse_live(const LiveArgs& a) {
  if (a.xdp && a.direction == "egress")
    throw std::runtime_error("--xdp sees ingress only; use tc (no --xdp) for --direction egress");
  LiveSpec spec;
  spec.duration_ns = parse_duration_ns(a.duration);
  if (spec.duration_ns == 0) throw std::runtime_error("--duration must be longer than 0");
  const auto widths = parse_windows(a.windows);
  spec.options.windows_ns.fill(0);
  std::copy(widths.begin(), widths.end(), spec.options.windows_ns.begin());
  std::string filter_text;
  spec.options.filter = parse_filter(a, filter_text);

  if (!may_load_bpf())
    throw std::runtime_error(
        "live mode needs root (or CAP_BPF/CAP_SYS_ADMIN and CAP_NET_ADMIN) to load the eBPF "
        "probe; run it with sudo, or use `dripgate-iat pcap` on a capture");
  // Resolves the name before loading anything: the commonest mistake gets the plainest error.
  spec.at = ebpf::Interface::resolve(a.iface, a.netns);

  spec.xdp = a.xdp;
  spec.xdp_flags = a.xdp_mode == "skb"   ? XDP_FLAGS_SKB_MODE
                   : a.xdp_mode == "drv" ? XDP_FLAGS_DRV_MODE
                                         : 0;
  spec.dir = a.direction == "egress" ? ebpf::Direction::kEgress : ebpf::Direction::kIngress;
  spec.where = fmt::format("{}{} {}{}", a.iface, a.netns.empty() ? "" : " (netns " + a.netns + ")",
                           a.xdp ? "xdp" : "tc " + a.direction,
                           filter_text.empty() ? "" : ", filter" + filter_text);
  return spec;
}

std::unique_ptr<ebpf::IatProbe> load_probe(const ebpf::Options& options) {
  try {
    return std::make_unique<ebpf::IatProbe>(options);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    struct statfs fs {};
    if (::statfs("/sys/fs/bpf", &fs) != 0 || static_cast<unsigned long>(fs.f_type) != kBpfFsMagic)
      msg += " (note: bpffs is not mounted at /sys/fs/bpf: mount -t bpf bpf /sys/fs/bpf)";
    throw std::runtime_error(msg);
  }
}

// Waits until `duration` after t0 or one of `sigs`; returns the signal, or 0.
int wait_for_stop(const sigset_t& sigs, uint64_t t0, uint64_t duration) {
  for (;;) {
    uint64_t now = mono_ns();
    if (now - t0 >= duration) return 0;
    uint64_t left = duration - (now - t0);
    timespec ts{static_cast<time_t>(left / 1'000'000'000ull),
                static_cast<long>(left % 1'000'000'000ull)};
    int r = sigtimedwait(&sigs, nullptr, &ts);
    if (r > 0) return r;
    if (r < 0 && errno != EAGAIN && errno != EINTR)
      throw std::runtime_error(fmt::format("sigtimedwait: {}", std::strerror(errno)));
  }
}

// One way down: arguments -> spec -> probe -> counters -> profile -> renderers.
int run_live(const LiveArgs& args, const Output& out) {
  const sigset_t sigs = stop_signals();
  if (sigprocmask(SIG_BLOCK, &sigs, nullptr) != 0)
    throw std::runtime_error(fmt::format("sigprocmask: {}", std::strerror(errno)));
  const LiveSpec spec = parse_live(args);

  std::unique_ptr<ebpf::IatProbe> probe = load_probe(spec.options);
  if (spec.xdp)
    probe->attach_xdp(spec.at, spec.xdp_flags);
  else
    probe->attach_tc(spec.at, spec.dir);
  const uint64_t t0 = mono_ns();
  const bool chatty = !out.quiet && out.json_path != "-";
  if (chatty)
    std::cerr << fmt::format("dripgate-iat: probing {} for {} (Ctrl-C ends early)\n", spec.where,
                             format_ns(static_cast<double>(spec.duration_ns)));

  const int signo = wait_for_stop(sigs, t0, spec.duration_ns);
  // Detach first: the maps outlive the hook, and once no packet can update them the histogram,
  // totals and windows read back as one consistent state.
  probe->detach();
  const uint64_t attached = mono_ns() - t0;
  const ebpf::Counters counters = probe->snapshot();
  probe.reset();

  emit(profile_from_counters(counters, attached, "live " + spec.where), out);
  if (signo && chatty)
    std::cerr << fmt::format(
        "dripgate-iat: stopped early by {} after {}; probe detached\n",
        sigabbrev_np(signo) ? fmt::format("SIG{}", sigabbrev_np(signo)) : std::to_string(signo),
        format_ns(static_cast<double>(attached)));
  return 0;
}

struct ServeArgs {
  std::string listen, period = "10s";
};

// Like live, without an end: the probe stays attached and /metrics is served until SIGTERM or
// SIGINT (SIGHUP too), then the probe is detached as in live.
int run_serve(const LiveArgs& args, const ServeArgs& serve) {
  const sigset_t sigs = stop_signals();
  if (sigprocmask(SIG_BLOCK, &sigs, nullptr) != 0)
    throw std::runtime_error(fmt::format("sigprocmask: {}", std::strerror(errno)));
  ServeSpec spec;
  spec.listen = serve.listen;
  spec.iface = args.iface;
  spec.period_ns = parse_duration_ns(serve.period);
  if (spec.period_ns < 1'000'000'000) throw std::runtime_error("--period must be at least 1s");
  const LiveSpec live = parse_live(args);
  spec.where = live.where;
  spec.windows_ns = parse_windows(args.windows);

  std::unique_ptr<ebpf::IatProbe> probe = load_probe(live.options);
  if (live.xdp)
    probe->attach_xdp(live.at, live.xdp_flags);
  else
    probe->attach_tc(live.at, live.dir);
  const int signo = serve_metrics(*probe, spec, sigs);
  probe->detach();
  probe.reset();
  std::cerr << fmt::format(
      "dripgate-iat: stopped by {}; probe detached\n",
      sigabbrev_np(signo) ? fmt::format("SIG{}", sigabbrev_np(signo)) : std::to_string(signo));
  return 0;
}

// The probe's options, shared by live and serve.
void add_probe_options(CLI::App* l, LiveArgs& live) {
  l->add_option("--iface", live.iface, "interface to probe")->required();
  l->add_option("--netns", live.netns, "network namespace of the interface (name in /run/netns)");
  l->add_option("--direction", live.direction, "tc hook: ingress or egress")
      ->check(CLI::IsMember({"ingress", "egress"}))
      ->capture_default_str();
  auto* xdp = l->add_flag("--xdp", live.xdp, "attach with XDP (ingress only) instead of tc");
  l->add_option("--xdp-mode", live.xdp_mode, "XDP mode: auto, skb or drv")
      ->check(CLI::IsMember({"auto", "skb", "drv"}))
      ->needs(xdp)
      ->capture_default_str();
  l->add_option("--filter-src", live.src, "count only packets from this prefix (CIDR)");
  l->add_option("--filter-dst", live.dst, "count only packets to this prefix (CIDR)");
  l->add_option("--filter-port,--filter-dport", live.dport,
                "count only packets to this port or port range (N or N-M)");
  l->add_option("--filter-sport", live.sport, "count only packets from this port or range");
  l->add_option("--filter-proto", live.proto, "count only tcp, udp, sctp or icmp")
      ->check(CLI::IsMember({"tcp", "udp", "sctp", "icmp"}));
  l->add_option("--window", live.windows, "burst window widths, at most 3 (e.g. 100us,1ms)")
      ->capture_default_str();
}

Profile load_profile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  nlohmann::json j;
  try {
    f >> j;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("'{}' is not JSON: {}", path, e.what()));
  }
  try {
    return from_json(j);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("'{}': {}", path, e.what()));
  }
}

int run(int argc, char** argv) {
  CLI::App app{"dripgate-iat: inter-arrival profiler (histogram, percentiles, burst windows)"};
  app.require_subcommand(1);

  LiveArgs live;
  Output live_out;
  auto* l = app.add_subcommand("live", "attach the eBPF probe to an interface for a while");
  add_probe_options(l, live);
  l->add_option("--duration", live.duration, "how long to collect (e.g. 5s, 500ms)")
      ->capture_default_str();
  add_output_options(l, live_out);

  LiveArgs served;
  served.windows = "100us,1ms,10ms";
  ServeArgs serve;
  auto* sv = app.add_subcommand(
      "serve", "keep the eBPF probe attached and serve Prometheus metrics until SIGTERM/SIGINT");
  add_probe_options(sv, served);
  sv->add_option("--listen", serve.listen, "host:port to serve GET /metrics on")->required();
  sv->add_option("--period", serve.period,
                 "the burst windows' sliding period: peaks and burst factors over the last this "
                 "long (at least 1s; set it to the scrape interval or longer)")
      ->capture_default_str();

  std::string pcap_file;
  PcapOptions pcap_opt;
  std::string pcap_windows = "100us,1ms";
  std::string pcap_interval;
  Output pcap_out;
  auto* pc = app.add_subcommand("pcap", "profile a pcap or pcapng capture");
  pc->add_option("file", pcap_file, "capture file")->required();
  pc->add_option("--filter", pcap_opt.filter, "pcap-filter(7) expression, e.g. 'udp port 9000'");
  pc->add_option("--window", pcap_windows, "burst window widths, at most 3 (e.g. 100us,1ms)")
      ->capture_default_str();
  pc->add_option("--interval", pcap_interval,
                 "ideal inter-arrival of a paced stream (1/rate, e.g. 2us): also report the "
                 "share of gaps within ±64/128/256/512 ns and ±1 us of it, exactly");
  add_output_options(pc, pcap_out);

  std::string cmp_a, cmp_b;
  auto* cmp = app.add_subcommand("compare", "two saved profiles (--json) side by side");
  cmp->add_option("a", cmp_a, "profile A (JSON)")->required();
  cmp->add_option("b", cmp_b, "profile B (JSON)")->required();

  CLI11_PARSE(app, argc, argv);

  if (*l) return run_live(live, live_out);
  if (*sv) return run_serve(served, serve);
  if (*pc) {
    pcap_opt.windows_ns = parse_windows(pcap_windows);
    if (!pcap_interval.empty()) {
      pcap_opt.interval_ns = parse_duration_ns(pcap_interval);
      if (pcap_opt.interval_ns == 0) throw std::runtime_error("--interval must be at least 1ns");
    }
    emit(profile_pcap(pcap_file, pcap_opt), pcap_out);
    return 0;
  }
  if (*cmp) {
    std::cout << render_compare(load_profile(cmp_a), load_profile(cmp_b), cmp_a, cmp_b);
    return 0;
  }
  return 1;
}

}  // namespace
}  // namespace dripgate::iat

int main(int argc, char** argv) {
  try {
    return dripgate::iat::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "dripgate-iat: " << e.what() << "\n";
    return 1;
  }
}
