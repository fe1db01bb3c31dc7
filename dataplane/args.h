// Command line of dripgate-dataplane. Everything after the first `--` is for the EAL.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/config.h"

namespace dripgate::dataplane {

struct Options {
  std::string config_path;  // empty: the embedded default config
  bool check = false;       // validate the config and exit
  bool preflight = false;   // check the box (hugepages, isolated CPUs, NIC drivers, …) and exit
  std::string log_level = "info";
  bool eal_replace =
      false;  // the EAL args after `--` replace dataplane.eal instead of extending it
  std::vector<std::string> eal_extra;
  // Overrides of the config file.
  std::optional<std::string> control_socket;
  std::optional<double> rate_pps, rate_bps;
  std::optional<uint32_t> batch;
  std::vector<unsigned> rx_lcores;  // empty: no override
  std::optional<unsigned> drip_lcore;
  std::optional<uint32_t> mbufs;
  // Run control.
  double duration_s = 0;     // > 0: stop by itself after this long (benchmarks)
  uint32_t drain_ms = 2000;  // on stop, keep dripping queued packets this long, then free them
  std::string stats_file;    // final stats JSON also written here
  // Benchmarks on net_null (whose frames are all zeroes, so not IP): shape non-IP frames in
  // this class instead of passing them unshaped.
  std::string shape_non_ip;
};

struct ParseOutcome {
  std::optional<Options> options;  // nullopt: exit with exit_code (help, or an error)
  int exit_code = 0;
};

// Parses argv; prints help or errors itself.
ParseOutcome parse_args(int argc, char** argv);

// Applies the overrides to the config's dataplane section.
void apply_overrides(const Options& o, config::Dataplane& dp);

// argv for rte_eal_init: program name, dataplane.eal, then (or instead) the extra args.
std::vector<std::string> eal_args(const Options& o, const config::Dataplane& dp,
                                  const std::string& prog);

}  // namespace dripgate::dataplane
