#include "dataplane/args.h"

#include <cstring>
#include <iostream>

#include <CLI/CLI.hpp>

namespace dripgate::dataplane {

ParseOutcome parse_args(int argc, char** argv) {
  // Split at the first "--" ourselves: CLI11 would take anything after it as positionals.
  int own = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      own = i;
      break;
    }
  }
  Options o;
  for (int i = own + 1; i < argc; ++i) o.eal_extra.emplace_back(argv[i]);

  CLI::App app{
      "dripgate-dataplane: DPDK bump-in-the-wire between a client port and a cluster port that\n"
      "classifies packets and drips them toward the cluster at fixed TSC intervals.\n"
      "Usage: dripgate-dataplane [options] [-- EAL args]"};
  app.add_option("-c,--config", o.config_path,
                 "YAML config file (default: the embedded default config)")
      ->check(CLI::ExistingFile);
  app.add_flag(
      "--check", o.check,
      "Validate the config and exit (0: valid, 1: errors, each as file:line:col: path: message)");
  app.add_flag("--preflight", o.preflight,
               "Check this box for the config's needs (hugepages, isolated drip CPU, vfio-pci, "
               "invariant TSC, CPU governor, memlock): each item with its state and fix; exit 0 "
               "when all pass, 1 otherwise");
  app.add_option("--log-level", o.log_level, "trace|debug|info|warn|error|critical|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.add_flag("--eal-replace", o.eal_replace,
               "EAL args after `--` replace dataplane.eal instead of being appended to it");
  app.add_option("--control-socket", o.control_socket, "Override dataplane.control_socket");
  app.add_option("--rate-pps", o.rate_pps, "Override dataplane.drip.rate_pps (0: unlimited)")
      ->check(CLI::Range(0.0, 1e12));
  app.add_option("--rate-bps", o.rate_bps, "Override dataplane.drip.rate_bps (0: unlimited)")
      ->check(CLI::Range(0.0, 1e12));
  app.add_option("--batch", o.batch, "Override dataplane.drip.batch")->check(CLI::Range(1, 64));
  app.add_option("--rx-lcore", o.rx_lcores, "Override dataplane.lcores.rx (a comma list: RSS)")
      ->delimiter(',');
  app.add_option("--drip-lcore", o.drip_lcore, "Override dataplane.lcores.drip");
  app.add_option("--mbufs", o.mbufs, "Override dataplane.mbufs")
      ->check(CLI::Range(1023u, 1u << 24));
  app.add_option("--duration", o.duration_s,
                 "Stop after this many seconds (0: run until signalled)")
      ->check(CLI::Range(0.0, 1e12));
  app.add_option("--drain-ms", o.drain_ms,
                 "On stop, keep dripping queued packets for at most this long, then free the rest")
      ->capture_default_str();
  app.add_option("--stats-file", o.stats_file, "Also write the final stats JSON to this file");
  app.add_option("--shape-non-ip", o.shape_non_ip,
                 "Shape non-IP frames in this class instead of passing them (benchmarks on "
                 "net_null, whose frames are all zeroes)");
  try {
    app.parse(own, argv);
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, app.exit(e)};
  }
  return {std::move(o), 0};
}

void apply_overrides(const Options& o, config::Dataplane& dp) {
  if (o.control_socket) dp.control_socket = *o.control_socket;
  if (o.rate_pps) dp.drip.rate_pps = *o.rate_pps;
  if (o.rate_bps) dp.drip.rate_bps = *o.rate_bps;
  if (o.batch) dp.drip.batch = *o.batch;
  if (!o.rx_lcores.empty()) dp.rx_lcores = o.rx_lcores;
  if (o.drip_lcore) dp.drip_lcore = *o.drip_lcore;
  if (o.mbufs) dp.mbufs = *o.mbufs;
}

std::vector<std::string> eal_args(const Options& o, const config::Dataplane& dp,
                                  const std::string& prog) {
  std::vector<std::string> args{prog};
  if (!o.eal_replace) args.insert(args.end(), dp.eal.begin(), dp.eal.end());
  args.insert(args.end(), o.eal_extra.begin(), o.eal_extra.end());
  return args;
}

}  // namespace dripgate::dataplane
